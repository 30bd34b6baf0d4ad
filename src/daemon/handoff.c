/* handoff.c — see handoff.h. */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "handoff.h"

int handoff_init(struct handoff *h)
{
	*h = (struct handoff){.eventfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)};
	if (h->eventfd < 0)
		return -errno;
	pthread_mutex_init(&h->lock, NULL);
	return 0;
}

void handoff_destroy(struct handoff *h)
{
	if (h->eventfd < 0)
		return;
	close(h->eventfd);
	h->eventfd = -1;
	pthread_mutex_destroy(&h->lock);
}

void handoff_post(struct handoff *h, struct handoff_item *item)
{
	item->next = NULL;
	pthread_mutex_lock(&h->lock);
	bool wake = !h->head; /* else a wake-up is pending: the take gets the whole list */
	if (h->tail)
		h->tail->next = item;
	else
		h->head = item;
	h->tail = item;
	pthread_mutex_unlock(&h->lock);
	if (wake) {
		uint64_t one = 1;
		(void)!write(h->eventfd, &one, sizeof(one));
	}
}

struct handoff_item *handoff_take(struct handoff *h)
{
	uint64_t n;
	(void)!read(h->eventfd, &n, sizeof(n));
	pthread_mutex_lock(&h->lock);
	struct handoff_item *list = h->head;
	h->head = h->tail = NULL;
	pthread_mutex_unlock(&h->lock);
	return list;
}
