/*
 * gpu.h — what the daemon knows of CUDA devices. Built against the CUDA
 * runtime when configure found it; otherwise every call reports that CUDA
 * is not built in, and host paths run unchanged.
 */
#ifndef KVTD_GPU_H
#define KVTD_GPU_H

#include <stdbool.h>
#include <stddef.h>

/*
 * The number of CUDA devices this process can use (>= 0), or a negative
 * error with the reason in why: -ENOTSUP when built without CUDA, -ENODEV
 * when the runtime reports no device or no driver.
 */
int gpu_device_count(char *why, size_t whylen);

/* Whether this kvtierd was built with CUDA (a build fact; asks no driver). */
bool gpu_built_in(void);

#endif
