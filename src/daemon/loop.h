/*
 * loop.h — the event loop's one idea: every fd in the epoll set is a
 * loop_source whose callback runs on the loop thread when it is ready.
 */
#ifndef KVTD_LOOP_H
#define KVTD_LOOP_H

#include <errno.h>
#include <stdint.h>
#include <sys/epoll.h>

struct loop_source {
	int fd;
	void (*on_event)(struct loop_source *src, uint32_t events);
};

static inline int loop_ctl(int epfd, int op, struct loop_source *s, uint32_t events)
{
	struct epoll_event ev = {.events = events, .data.ptr = s};
	return epoll_ctl(epfd, op, s->fd, &ev) ? -errno : 0;
}

#endif
