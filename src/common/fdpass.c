/* fdpass.c — fdpass_send(): one sendmsg() carrying an optional fd. */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "fdpass.h"

ssize_t fdpass_send(int sock, const void *buf, size_t len, int pass_fd)
{
	struct iovec iov = {(void *)buf, len};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	if (pass_fd >= 0) {
		memset(&ctl, 0, sizeof(ctl));
		msg.msg_control = ctl.buf;
		msg.msg_controllen = sizeof(ctl.buf);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
	}
	for (;;) {
		ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL);
		if (n >= 0)
			return n;
		if (errno != EINTR)
			return -errno;
	}
}
