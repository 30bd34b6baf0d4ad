/* offload.c — see offload.h. */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "offload.h"

static void *worker(void *arg)
{
	struct offload *o = arg;
	pthread_mutex_lock(&o->lock);
	for (;;) {
		while (STAILQ_EMPTY(&o->todo) && !o->stopping)
			pthread_cond_wait(&o->wake, &o->lock);
		struct offload_job *job = STAILQ_FIRST(&o->todo);
		if (!job)
			break; /* stopping, and nothing left to run */
		STAILQ_REMOVE_HEAD(&o->todo, queue);
		pthread_mutex_unlock(&o->lock);
		job->run(job);
		handoff_post(&o->done, &job->done_link);
		pthread_mutex_lock(&o->lock);
	}
	pthread_mutex_unlock(&o->lock);
	return NULL;
}

int offload_open(struct offload *o)
{
	memset(o, 0, sizeof(*o));
	STAILQ_INIT(&o->todo);
	int err = handoff_init(&o->done);
	if (err)
		return err;
	pthread_mutex_init(&o->lock, NULL);
	pthread_cond_init(&o->wake, NULL);
	if ((err = -pthread_create(&o->thread, NULL, worker, o))) {
		handoff_destroy(&o->done);
		return err;
	}
	o->started = true;
	return 0;
}

void offload_submit(struct offload *o, struct offload_job *job)
{
	o->pending++;
	pthread_mutex_lock(&o->lock);
	STAILQ_INSERT_TAIL(&o->todo, job, queue);
	pthread_cond_signal(&o->wake);
	pthread_mutex_unlock(&o->lock);
}

/* Calls done for each job the worker handed back, in submission order. */
void offload_reap(struct offload *o)
{
	struct handoff_item *i = handoff_take(&o->done);
	while (i) {
		struct offload_job *job =
			(struct offload_job *)((char *)i - offsetof(struct offload_job, done_link));
		i = i->next; /* before done: it may free the job */
		o->pending--;
		job->done(job);
	}
}

void offload_close(struct offload *o)
{
	if (!o->started)
		return;
	pthread_mutex_lock(&o->lock);
	o->stopping = true;
	pthread_cond_signal(&o->wake);
	pthread_mutex_unlock(&o->lock);
	pthread_join(o->thread, NULL);
	o->started = false;
	offload_reap(o);
	pthread_mutex_destroy(&o->lock);
	pthread_cond_destroy(&o->wake);
	handoff_destroy(&o->done);
}
