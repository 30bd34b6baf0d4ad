/*
 * fuzz_l3name.c — libFuzzer target for l3_name_parse: the input is a file
 * name as the L3 walk reads it from a directory every node (and anything
 * else with access) writes into. Parsing must never read past the name, and
 * a name it accepts must be exactly what l3_part_path writes for the key and
 * rank it returns (one spelling per part, so a walk never counts a stranger).
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "l3.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char name[256], path[L3_PATH_MAX];
	size_t n = size < sizeof(name) - 1 ? size : sizeof(name) - 1;
	memcpy(name, data, n);
	name[n] = 0;
	struct kvt_key key;
	uint16_t rank;
	if (l3_name_parse(name, &key, &rank))
		return 0;
	if (l3_part_path(path, sizeof(path), "", 0, &key, rank))
		abort();
	if (strcmp(strrchr(path, '/') + 1, name) != 0)
		abort();
	return 0;
}
