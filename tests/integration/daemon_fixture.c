/* daemon_fixture.c — see daemon_fixture.h. */
#define _GNU_SOURCE
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon_fixture.h"

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

int daemon_start(struct daemon_fixture *d, const char *const *flags)
{
	const char *bin = getenv("KVTIERD");
	if (!bin)
		bin = KVT_BUILDDIR "/kvtierd";
	snprintf(d->dir, sizeof(d->dir), "/tmp/kvtier-dp.XXXXXX");
	if (!mkdtemp(d->dir))
		return -1;
	snprintf(d->socket, sizeof(d->socket), "%s/s.sock", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/kvtierd.log", d->dir);
	const char *argv[32] = {bin, "--runtime-dir", d->dir, "--socket", d->socket,
				"--http", "127.0.0.1:0", "--log-level", "debug"};
	int argc = 9;
	for (int i = 0; flags && flags[i] && argc < 31; i++)
		argv[argc++] = flags[i];
	argv[argc] = NULL;
	d->pid = fork();
	if (d->pid < 0)
		return -1;
	if (d->pid == 0) {
		int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(fd, 2);
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	/* Wait (at most 60 s: a loaded CI machine is slow to map L1) for the "ready:" line. */
	for (int i = 0; i < 1200; i++) {
		FILE *f = fopen(d->log, "r");
		char line[512];
		while (f && fgets(line, sizeof(line), f)) {
			const char *p = strstr(line, "ready: control plane on http://");
			unsigned port;
			if (p && (p = strstr(p, "/, data plane")) && (p = memrchr(line, ':', (size_t)(p - line))) &&
			    sscanf(p, ":%u/", &port) == 1) {
				d->http_port = (uint16_t)port;
				fclose(f);
				return 0;
			}
		}
		if (f)
			fclose(f);
		if (waitpid(d->pid, NULL, WNOHANG) == d->pid)
			return -1;
		sleep_ms(50);
	}
	return -1;
}

int daemon_stop(struct daemon_fixture *d)
{
	int status = -1;
	kill(d->pid, SIGTERM);
	for (int i = 0; i < 400; i++) {
		if (waitpid(d->pid, &status, WNOHANG) == d->pid)
			break;
		sleep_ms(25);
		status = -1;
	}
	if (status == -1) {
		kill(d->pid, SIGKILL);
		waitpid(d->pid, NULL, 0);
		return -1;
	}
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", d->dir);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		(void)!system(cmd); /* keep the log of a failed run */
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

json_t *daemon_get_json(const struct daemon_fixture *d, const char *path)
{
	int status;
	return daemon_request(d, "GET", path, NULL, &status);
}

char *daemon_request_text(const struct daemon_fixture *d, const char *method, const char *path,
			  const char *body, int *status)
{
	*status = 0;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(d->http_port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	char req[4096];
	int n = snprintf(req, sizeof(req),
			 "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
			 "Content-Length: %zu\r\n\r\n%s",
			 method, path, body ? strlen(body) : 0, body ? body : "");
	if (write(fd, req, (size_t)n) != n) {
		close(fd);
		return NULL;
	}
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	ssize_t r;
	while ((r = read(fd, buf + len, cap - len - 1)) > 0) {
		len += (size_t)r;
		if (len + 1 == cap)
			buf = realloc(buf, cap *= 2);
	}
	close(fd);
	buf[len] = '\0';
	sscanf(buf, "HTTP/1.%*d %d", status);
	char *answer = strstr(buf, "\r\n\r\n");
	if (!answer) {
		free(buf);
		return NULL;
	}
	memmove(buf, answer + 4, strlen(answer + 4) + 1);
	return buf;
}

json_t *daemon_request(const struct daemon_fixture *d, const char *method, const char *path,
		       const char *body, int *status)
{
	char *text = daemon_request_text(d, method, path, body, status);
	json_t *j = text ? json_loads(text, 0, NULL) : NULL;
	free(text);
	return j;
}

long long daemon_stat(const struct daemon_fixture *d, const char *dotted)
{
	json_t *root = daemon_get_json(d, "/v1/stats");
	json_t *v = root;
	char path[256];
	snprintf(path, sizeof(path), "%s", dotted);
	for (char *save = NULL, *tok = strtok_r(path, ".", &save); v && tok;
	     tok = strtok_r(NULL, ".", &save))
		v = json_object_get(v, tok);
	long long out = json_is_integer(v) ? (long long)json_integer_value(v) : -1;
	json_decref(root);
	return out;
}
