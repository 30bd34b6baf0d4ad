/* offload.c — see offload.h. */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "offload.h"

static void list_append(struct offload_job **head, struct offload_job **tail,
			struct offload_job *job)
{
	job->next = NULL;
	if (*tail)
		(*tail)->next = job;
	else
		*head = job;
	*tail = job;
}

static void *worker(void *arg)
{
	struct offload *o = arg;
	pthread_mutex_lock(&o->lock);
	for (;;) {
		while (!o->todo_head && !o->stopping)
			pthread_cond_wait(&o->wake, &o->lock);
		if (!o->todo_head)
			break; /* stopping, and nothing left to run */
		struct offload_job *job = o->todo_head;
		if (!(o->todo_head = job->next))
			o->todo_tail = NULL;
		pthread_mutex_unlock(&o->lock);
		job->run(job);
		pthread_mutex_lock(&o->lock);
		bool wake = !o->done_head; /* else a wake-up is pending: the reap takes the list */
		list_append(&o->done_head, &o->done_tail, job);
		if (wake) {
			uint64_t one = 1;
			(void)!write(o->eventfd, &one, sizeof(one));
		}
	}
	pthread_mutex_unlock(&o->lock);
	return NULL;
}

int offload_open(struct offload *o)
{
	memset(o, 0, sizeof(*o));
	o->eventfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (o->eventfd < 0)
		return -errno;
	pthread_mutex_init(&o->lock, NULL);
	pthread_cond_init(&o->wake, NULL);
	int err = pthread_create(&o->thread, NULL, worker, o);
	if (err) {
		close(o->eventfd);
		o->eventfd = -1;
		return -err;
	}
	o->started = true;
	return 0;
}

void offload_submit(struct offload *o, struct offload_job *job)
{
	o->pending++;
	pthread_mutex_lock(&o->lock);
	list_append(&o->todo_head, &o->todo_tail, job);
	pthread_cond_signal(&o->wake);
	pthread_mutex_unlock(&o->lock);
}

/* Calls done for each job of list (taken off the shared lists already). */
static void finish(struct offload *o, struct offload_job *list)
{
	while (list) {
		struct offload_job *next = list->next;
		o->pending--;
		list->done(list);
		list = next;
	}
}

void offload_reap(struct offload *o)
{
	uint64_t n;
	(void)!read(o->eventfd, &n, sizeof(n));
	pthread_mutex_lock(&o->lock);
	struct offload_job *list = o->done_head;
	o->done_head = o->done_tail = NULL;
	pthread_mutex_unlock(&o->lock);
	finish(o, list);
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
	struct offload_job *done = o->done_head;
	o->done_head = o->done_tail = NULL;
	finish(o, done);
	pthread_mutex_destroy(&o->lock);
	pthread_cond_destroy(&o->wake);
	close(o->eventfd);
	o->eventfd = -1;
}
