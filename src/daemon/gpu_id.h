/*
 * gpu_id.h — GPU identifiers as text, as the control plane and the logs
 * write them: device UUIDs ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as
 * nvidia-smi -L prints them) and cudaIpcMemHandle_t (128 hex digits). Pure
 * functions, no CUDA: any thread.
 */
#ifndef KVTD_GPU_ID_H
#define KVTD_GPU_ID_H

#include <stdint.h>

#include "kvtier/protocol.h"

/* Writes "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (41 bytes with the NUL). */
void gpu_uuid_format(const uint8_t uuid[KVT_UUID_BYTES], char out[41]);
/* Parses that form, with or without "GPU-": 0 or -EINVAL. */
int gpu_uuid_parse(const char *text, uint8_t uuid[KVT_UUID_BYTES]);
/* Parses a cudaIpcMemHandle_t written as 128 hex digits: 0 or -EINVAL. */
int gpu_ipc_handle_parse(const char *text, uint8_t handle[KVT_IPC_HANDLE_BYTES]);

#endif
