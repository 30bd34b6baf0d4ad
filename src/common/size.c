/* size.c — parsing and printing of byte sizes with units (kvt_parse_size). */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "kvtier/kvtier.h"

struct size_unit {
	const char *name;
	uint64_t factor;
};

static const struct size_unit size_units[] = {
	{"", 1},
	{"B", 1},
	{"KiB", UINT64_C(1) << 10},
	{"MiB", UINT64_C(1) << 20},
	{"GiB", UINT64_C(1) << 30},
	{"TiB", UINT64_C(1) << 40},
	{"KB", UINT64_C(1000)},
	{"MB", UINT64_C(1000000)},
	{"GB", UINT64_C(1000000000)},
	{"TB", UINT64_C(1000000000000)},
};

int kvt_parse_size(const char *text, uint64_t *bytes)
{
	if (!text || !isdigit((unsigned char)*text))
		return -EINVAL;
	uint64_t value = 0;
	const char *p = text;
	for (; isdigit((unsigned char)*p); p++) {
		unsigned digit = (unsigned)(*p - '0');
		if (value > (UINT64_MAX - digit) / 10)
			return -ERANGE;
		value = value * 10 + digit;
	}
	if (*p == ' ')
		p++;
	for (size_t i = 0; i < sizeof(size_units) / sizeof(size_units[0]); i++) {
		if (strcmp(p, size_units[i].name) != 0)
			continue;
		if (value > UINT64_MAX / size_units[i].factor)
			return -ERANGE;
		*bytes = value * size_units[i].factor;
		return 0;
	}
	return -EINVAL;
}

int kvt_format_size(uint64_t bytes, char *buf, size_t buflen)
{
	static const char *const binary[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	unsigned u = 0;
	while (u + 1 < sizeof(binary) / sizeof(binary[0]) && bytes != 0 &&
	       bytes % 1024 == 0) {
		bytes /= 1024;
		u++;
	}
	return snprintf(buf, buflen, "%" PRIu64 " %s", bytes, binary[u]);
}
