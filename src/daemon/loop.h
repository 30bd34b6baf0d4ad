/*
 * loop.h — kvtierd's event loop (the loop thread owns it and everything it
 * runs): every fd in the epoll set is a loop_source whose callback runs when
 * the fd is ready; periodic timers are sources too; and modules register
 * before-wait hooks that run after each batch of events, before the loop
 * waits again.
 *
 * The lifetime rule the loop gives: one epoll_wait batch may name an object
 * whose handler, earlier in the same batch, ended it (a copy completion ends
 * the last request of a client whose hang-up is the next event). So a source
 * that can end mid-batch is never freed by an event handler: it is marked
 * dead (its handler then ignores events) and freed by its owner's hook, after
 * the batch. Errors are negative errno.
 */
#ifndef KVTD_LOOP_H
#define KVTD_LOOP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/queue.h>

struct loop_source {
	int fd;
	void (*on_event)(struct loop_source *src, uint32_t events);
};

/* Runs after every batch of events, in the order the hooks were added. */
struct loop_hook {
	void (*run)(struct loop_hook *hook);
	TAILQ_ENTRY(loop_hook) link;
};

/* A periodic timer (a timerfd): run(timer) every period, on the loop thread. */
struct loop_timer {
	struct loop_source src;
	void (*run)(struct loop_timer *timer);
};

struct loop {
	int epfd;
	TAILQ_HEAD(, loop_hook) hooks;
	int wait_ms;                /* the next wait's bound, set by hooks; -1: none */
	bool stop;
};

/* 0 or -errno (epoll_create1). */
int loop_init(struct loop *l);
void loop_destroy(struct loop *l);

/* Watches s->fd for events (EPOLLIN, EPOLLOUT, ...); 0 or -errno. */
int loop_add(struct loop *l, struct loop_source *s, uint32_t events);
/* Changes the events watched; 0 or -errno. */
int loop_mod(struct loop *l, struct loop_source *s, uint32_t events);
/* Stops watching s (an event already in this batch may still be delivered). */
void loop_del(struct loop *l, struct loop_source *s);

/* Starts t firing every period_ms (first after one period). 0 or -errno. */
int loop_add_timer(struct loop *l, struct loop_timer *t, unsigned period_ms,
		   void (*run)(struct loop_timer *t));
/* Stops and closes t (nothing when it never started). */
void loop_del_timer(struct loop *l, struct loop_timer *t);

void loop_add_hook(struct loop *l, struct loop_hook *hook);
/*
 * From a hook: the next wait lasts at most ms, for an owner that must look
 * again even if no fd becomes ready (each round's hooks start from no bound).
 */
void loop_wake_within(struct loop *l, int ms);
void loop_remove_hook(struct loop *l, struct loop_hook *hook);

/* Dispatches events and runs hooks until loop_stop; 0 or -errno (epoll_wait). */
int loop_run(struct loop *l);
/*
 * One round: waits up to timeout_ms (-1: for ever) for a batch, dispatches
 * it, runs the hooks. For owners that drain their work at shutdown, when
 * loop_run has returned. 0 or -errno.
 */
int loop_run_once(struct loop *l, int timeout_ms);
/* Makes loop_run return after the current batch and its hooks. */
void loop_stop(struct loop *l);

#endif
