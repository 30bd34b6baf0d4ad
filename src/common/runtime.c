/*
 * runtime.c — where kvtierd keeps its socket by default, for the daemon's
 * settings and for every client (libkvtier's kvt_default_socket): one rule,
 * so a client run as the same user finds the daemon with no flag.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvtier/kvtier.h"
#include "runtime.h"

int kvt_default_runtime_dir(char *buf, size_t len)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	int n;
	if (geteuid() == 0)
		n = snprintf(buf, len, "/run/kvtier");
	else if (xdg && *xdg)
		n = snprintf(buf, len, "%s/kvtier", xdg);
	else
		n = snprintf(buf, len, "/tmp/kvtier-%u", (unsigned)geteuid());
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int kvt_default_socket(char *buf, size_t len)
{
	int err = kvt_default_runtime_dir(buf, len);
	if (err)
		return err;
	size_t n = strnlen(buf, len);
	return (size_t)snprintf(buf + n, len - n, "/kvtierd.sock") >= len - n ? -ENAMETOOLONG : 0;
}
