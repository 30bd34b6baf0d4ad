/*
 * webui.h — the dashboard's files (web/): where they are, which names may be
 * served, with what content type and validator. No HTTP here; http.c turns
 * an opened file into a response.
 */
#ifndef KVTD_WEBUI_H
#define KVTD_WEBUI_H

#include <stdint.h>

struct webui_file {
	int fd;
	uint64_t size;
	const char *content_type;
	char etag[48];          /* a strong validator from size and modification time */
};

/*
 * The directory to serve: configured when given, else the installed one
 * ($(pkgdatadir)/web), else the source tree's web/ (a build tree). NULL when
 * the chosen one has no index.html.
 */
const char *webui_find_dir(const char *configured);

/*
 * Opens the file url names ("/" is index.html) in dir. Only plain names of
 * the directory itself ([A-Za-z0-9._-], not starting with a dot) that are
 * regular files, not links, are served; opening never blocks (a FIFO is
 * refused at once). 0, or -ENOENT.
 */
int webui_open(const char *dir, const char *url, struct webui_file *out);

#endif
