/*
 * fuzz_config.c — libFuzzer target for the config file loader: arbitrary
 * bytes as the JSON file, plus the same bytes as a --l1-size flag, through
 * kvtd_config_load. It must never crash, leak or read out of bounds; every
 * input either loads or fails with a message.
 *
 * Built with clang -fsanitize=fuzzer by `make fuzz`; replayed over the seed
 * corpus by `make check` through replay.c.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "settings.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_create("kvtier-fuzz-config", MFD_CLOEXEC);
	if (fd < 0)
		return 0;
	if (write(fd, data, size) != (ssize_t)size) {
		close(fd);
		return 0;
	}
	char path[64], flag[256];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	size_t n = size < sizeof(flag) - 1 ? size : sizeof(flag) - 1;
	memcpy(flag, data, n);
	flag[n] = '\0';

	char *argv[] = {"kvtierd", "--config", path, "--runtime-dir", "/tmp/kvtier-fuzz", NULL};
	char *argv_flag[] = {"kvtierd", "--l1-size", flag, "--runtime-dir", "/tmp/kvtier-fuzz",
			     NULL};
	struct kvtd_config cfg;
	enum kvtd_action action;
	char err[1024];
	if (kvtd_config_load(&cfg, 5, argv, &action, err, sizeof(err)) == 0)
		kvtd_config_free(&cfg);
	if (kvtd_config_load(&cfg, 5, argv_flag, &action, err, sizeof(err)) == 0)
		kvtd_config_free(&cfg);
	close(fd);
	return 0;
}
