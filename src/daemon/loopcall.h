/*
 * loopcall.h — running a function on the event loop thread from another
 * thread (the control plane's), and waiting for it. The tiers and the data
 * plane belong to the loop thread; this is the one door into them.
 */
#ifndef KVTD_LOOPCALL_H
#define KVTD_LOOPCALL_H

#include <sys/queue.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "loop.h"

struct loopcall_item;

struct loopcall {
	struct loop_source src;     /* an eventfd in the loop's epoll set */
	pthread_mutex_t lock;
	pthread_cond_t done;        /* on CLOCK_MONOTONIC */
	STAILQ_HEAD(, loopcall_item) queue;  /* calls waiting, in the order they came */
	bool closed;
	_Atomic uint64_t *timeouts; /* counts calls taken back at their deadline; NULL: none */
};

/* 0, or -errno (eventfd, epoll). */
int loopcall_open(struct loopcall *lc, struct loop *loop);
/* Fails every call still waiting and every later one with -ESHUTDOWN. */
void loopcall_shutdown(struct loopcall *lc);
void loopcall_close(struct loopcall *lc);

/*
 * A call the loop has not started within this long is taken back: a busy or
 * stalled loop answers the control plane with an error, not with a thread
 * that waits without end. (A call the loop has started runs to its end.)
 */
#define LOOPCALL_DEADLINE_MS 5000

/*
 * Runs fn(arg) on the loop thread and returns its result; -ESHUTDOWN when
 * stopping, -ETIMEDOUT when the loop did not start it within
 * LOOPCALL_DEADLINE_MS (fn did not run).
 */
int loopcall_run(struct loopcall *lc, int (*fn)(void *arg), void *arg);

#endif
