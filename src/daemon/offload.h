/*
 * offload.h — a worker thread for CPU work the event loop must not do
 * itself (checksumming blocks of many MiB): the loop queues jobs, the
 * thread runs them in order, and the loop gets each back through the
 * offload's handoff (handoff.h), where its done callback runs.
 *
 * Owner: the loop thread calls everything here; job->run runs on the
 * worker thread and must touch only what the job owns. A job's memory
 * belongs to its submitter until done is called. Written by hand: the
 * libraries here (GLib's thread pool, libuv's work queue) would bring their
 * own loop or a dependency for forty lines.
 */
#ifndef KVTD_OFFLOAD_H
#define KVTD_OFFLOAD_H

#include <pthread.h>
#include <stdbool.h>
#include <sys/queue.h>

#include "handoff.h"

struct offload_job {
	void (*run)(struct offload_job *job);   /* on the worker thread */
	void (*done)(struct offload_job *job);  /* on the loop thread, after run */
	STAILQ_ENTRY(offload_job) queue;        /* to the worker */
	struct handoff_item done_link;          /* and back to the loop */
};

struct offload {
	struct handoff done;          /* jobs run; done.eventfd is readable: call offload_reap */
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	STAILQ_HEAD(, offload_job) todo;  /* FIFO, guarded by lock */
	unsigned pending;             /* submitted, done not yet called (loop thread only) */
	bool stopping;
	bool started;
};

/* Starts the worker thread; 0 or -errno (eventfd, pthread_create). */
int offload_open(struct offload *o);
/* Runs every job queued, stops the thread, then calls done for each not yet reaped. */
void offload_close(struct offload *o);

/* Queues job (never waits; the queue is a list of the callers' jobs). */
void offload_submit(struct offload *o, struct offload_job *job);
/* Calls done for each finished job, in submission order; clears the eventfd. */
void offload_reap(struct offload *o);

#endif
