/* http_origin.c — see http_origin.h. */
#include "config.h"

#include <arpa/inet.h>
#include <string.h>
#include <strings.h>

#include "http_origin.h"

#define HOST_MAX 256

/* The name part of a Host value (no port, no brackets, no trailing dot) into out. */
static bool host_name(const char *host, char *out, size_t outlen)
{
	size_t len;
	if (host[0] == '[') {
		const char *end = strchr(host, ']');
		if (!end || (end[1] != '\0' && end[1] != ':'))
			return false;
		host++;
		len = (size_t)(end - host);
	} else {
		const char *colon = strchr(host, ':');
		len = colon ? (size_t)(colon - host) : strlen(host);
	}
	if (len && host[len - 1] == '.')
		len--;
	if (len == 0 || len >= outlen)
		return false;
	memcpy(out, host, len);
	out[len] = '\0';
	return true;
}

static bool ip_literal(const char *name)
{
	unsigned char addr[16];
	return inet_pton(AF_INET, name, addr) == 1 || inet_pton(AF_INET6, name, addr) == 1;
}

/* name is one of the comma-separated names (no case, a trailing dot ignored). */
static bool listed(const char *name, const char *names)
{
	size_t len = strlen(name);
	for (const char *p = names; p && *p;) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);
		size_t cmp = n && p[n - 1] == '.' ? n - 1 : n;
		if (cmp == len && strncasecmp(p, name, len) == 0)
			return true;
		p = comma ? comma + 1 : NULL;
	}
	return false;
}

bool http_host_allowed(const char *host, const char *names)
{
	char name[HOST_MAX];
	if (!host)
		return true;
	if (!host_name(host, name, sizeof(name)))
		return false;
	return ip_literal(name) || strcasecmp(name, "localhost") == 0 || listed(name, names);
}

bool http_origin_allowed(const char *origin, const char *host)
{
	if (!origin)
		return true;
	if (!host)
		return false;
	if (strncasecmp(origin, "http://", 7) == 0)
		origin += 7;
	else if (strncasecmp(origin, "https://", 8) == 0)
		origin += 8;
	else
		return false; /* "null" (a sandboxed or file: page), or another scheme */
	return strcasecmp(origin, host) == 0;
}
