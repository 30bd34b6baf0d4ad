/* gpu_id.c — see gpu_id.h. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "gpu_id.h"

void gpu_uuid_format(const uint8_t u[KVT_UUID_BYTES], char out[41])
{
	snprintf(out, 41,
		 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
		 u[13], u[14], u[15]);
}

static int hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Decodes n bytes of hex digits at *text, moving it past them: 0 or -EINVAL. */
static int hex_bytes(const char **text, uint8_t *out, size_t n)
{
	const char *t = *text;
	for (size_t i = 0; i < n; i++, t += 2) {
		int hi = hex_value(t[0]), lo = hi < 0 ? -1 : hex_value(t[1]);
		if (lo < 0)
			return -EINVAL;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	*text = t;
	return 0;
}

int gpu_uuid_parse(const char *text, uint8_t uuid[KVT_UUID_BYTES])
{
	static const uint8_t groups[] = {4, 2, 2, 2, 6}; /* 8-4-4-4-12 hex digits */
	if (strncmp(text, "GPU-", 4) == 0)
		text += 4;
	for (size_t g = 0, at = 0; g < sizeof(groups); at += groups[g++]) {
		if ((g && *text++ != '-') || hex_bytes(&text, uuid + at, groups[g]))
			return -EINVAL;
	}
	return *text ? -EINVAL : 0;
}

int gpu_ipc_handle_parse(const char *text, uint8_t handle[KVT_IPC_HANDLE_BYTES])
{
	return hex_bytes(&text, handle, KVT_IPC_HANDLE_BYTES) || *text ? -EINVAL : 0;
}
