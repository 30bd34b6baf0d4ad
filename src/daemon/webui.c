/* webui.c — see webui.h. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "webui.h"

static const struct {
	const char *ext;
	const char *type;
} types[] = {
	{".html", "text/html; charset=utf-8"},
	{".js", "text/javascript; charset=utf-8"},
	{".css", "text/css; charset=utf-8"},
	{".svg", "image/svg+xml"},
	{".png", "image/png"},
	{".ico", "image/x-icon"},
};

static bool has_index(const char *dir)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/index.html", dir);
	return access(path, R_OK) == 0;
}

const char *webui_find_dir(const char *configured)
{
	if (configured)
		return has_index(configured) ? configured : NULL;
	if (has_index(KVT_WEBDIR))
		return KVT_WEBDIR;
	return has_index(KVT_SRCDIR "/web") ? KVT_SRCDIR "/web" : NULL;
}

static const char *content_type(const char *name)
{
	const char *dot = strrchr(name, '.');
	for (size_t i = 0; dot && i < sizeof(types) / sizeof(types[0]); i++)
		if (strcmp(dot, types[i].ext) == 0)
			return types[i].type;
	return NULL;
}

static bool plain_name(const char *name)
{
	if (!*name || *name == '.' || strlen(name) > 128)
		return false;
	for (const char *p = name; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '.' || *p == '_' || *p == '-'))
			return false;
	return true;
}

int webui_open(const char *dir, const char *url, struct webui_file *out)
{
	const char *name = strcmp(url, "/") == 0 ? "index.html" : url + 1;
	const char *type = content_type(name);
	if (!dir || *url != '/' || !plain_name(name) || !type)
		return -ENOENT;
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	/* No link is followed (a symlink could name any file) and nothing blocks the HTTP
	 * thread (a FIFO would, until a writer came): regular files only. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		if (fd >= 0)
			close(fd);
		return -ENOENT;
	}
	out->fd = fd;
	out->size = (uint64_t)st.st_size;
	out->content_type = type;
	snprintf(out->etag, sizeof(out->etag), "\"%llx-%llx\"", (unsigned long long)st.st_size,
		 (unsigned long long)st.st_mtim.tv_sec * 1000000000ull +
			 (unsigned long long)st.st_mtim.tv_nsec);
	return 0;
}
