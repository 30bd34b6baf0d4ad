/*
 * loopcall.h — running a function on the event loop thread from another
 * thread (the control plane's), and waiting for it. The tiers and the data
 * plane belong to the loop thread; this is the one door into them.
 */
#ifndef KVTD_LOOPCALL_H
#define KVTD_LOOPCALL_H

#include <sys/queue.h>
#include <pthread.h>
#include <stdbool.h>

#include "loop.h"

struct loopcall_item;

struct loopcall {
	struct loop_source src;     /* an eventfd in the loop's epoll set */
	pthread_mutex_t lock;
	pthread_cond_t done;
	STAILQ_HEAD(, loopcall_item) queue;  /* calls waiting, in the order they came */
	bool closed;
};

/* 0, or -errno (eventfd, epoll). */
int loopcall_open(struct loopcall *lc, struct loop *loop);
/* Fails every call still waiting and every later one with -ESHUTDOWN. */
void loopcall_shutdown(struct loopcall *lc);
void loopcall_close(struct loopcall *lc);

/* Runs fn(arg) on the loop thread and returns its result; -ESHUTDOWN when stopping. */
int loopcall_run(struct loopcall *lc, int (*fn)(void *arg), void *arg);

#endif
