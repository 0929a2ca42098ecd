// SPDX-License-Identifier: MIT
/*
 * run.c - captive mode (run.h).  The environment and the command's ids
 * are ready before the fork: the server has threads, so the child may
 * only call what is safe after fork() in a threaded process (execve()
 * with a ready array, setgroups/setgid/setuid, read, write).
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bionbd/nbdl.h>

#include "run.h"

extern char **environ;

static ev_child child;
static struct ev_loop *child_loop;
static void (*child_done)(struct ev_loop *loop, int status);
/*
 * The command leads a process group of its own, so that a signal reaches
 * whatever it started too, and never the server's own group (a script
 * that started bionbd in the background shares it).  Not when standard
 * input is a terminal: an interactive command must stay in the terminal's
 * foreground group to read it, where a key's signal reaches it anyway.
 */
static bool own_group;
static bool signalled; /* run_signal passed a signal on */

/* Append @s to @out percent-encoded; "/" stays as it is when @keep_slash. */
static void pct_encode(FILE *out, const char *s, bool keep_slash)
{
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
		    (ch >= '0' && ch <= '9') || strchr("-._~", ch) ||
		    (keep_slash && ch == '/'))
			fputc(ch, out);
		else
			fprintf(out, "%%%02X", ch);
	}
}

char *run_uri(const struct run_addr *a)
{
	const char *host = a->host;
	char *uri = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&uri, &len);

	if (!f)
		return NULL;
	if (a->socket) {
		fputs(a->tls ? "nbds+unix:///" : "nbd+unix:///", f);
		pct_encode(f, a->export_name, false);
		fputs("?socket=", f);
		pct_encode(f, a->socket, true);
	} else {
		/* A wildcard address is reached on this machine as localhost. */
		if (!host || !*host || !strcmp(host, "0.0.0.0") ||
		    !strcmp(host, "::"))
			host = "localhost";
		fprintf(f, strchr(host, ':') ? "%s://[%s]:%s/" : "%s://%s:%s/",
			a->tls ? "nbds" : "nbd", host, a->port);
		pct_encode(f, a->export_name, false);
	}
	if (fclose(f)) {
		free(uri);
		return NULL;
	}
	return uri;
}

static void env_free(char **env, size_t mine)
{
	for (size_t i = mine; env[i]; i++)
		free(env[i]);
	free(env);
}

/* NAME=VALUE into @slot (NULL if out of memory, ending the array there). */
static bool env_add(char **slot, const char *name, const char *value)
{
	if (asprintf(slot, "%s=%s", name, value) < 0) {
		*slot = NULL;
		return false;
	}
	return true;
}

static bool ours(const char *var)
{
	static const char *const names[] = { "uri=", "unixsocket=", "port=",
					     "exportname=", "nbd=" };

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strncmp(var, names[i], strlen(names[i])))
			return true;
	return false;
}

/*
 * environ without our names, then ours from (*@mine) on, which the caller
 * frees (env_free); NULL on ENOMEM.
 */
static char **run_env(const struct run_addr *a, size_t *mine)
{
	size_t n = 0, k = 0;
	char **env, *uri = run_uri(a);
	bool ok;

	while (environ[n])
		n++;
	env = calloc(n + 5, sizeof(*env));
	if (!env || !uri) {
		free(uri);
		free(env);
		return NULL;
	}
	for (size_t i = 0; i < n; i++)
		if (!ours(environ[i]))
			env[k++] = environ[i];
	*mine = k;
	ok = env_add(&env[k++], "uri", uri) &&
	     env_add(&env[k++], "exportname", a->export_name) &&
	     (!a->socket || env_add(&env[k++], "unixsocket", a->socket)) &&
	     (!a->port || env_add(&env[k++], "port", a->port));
	free(uri);
	if (!ok) {
		env_free(env, *mine);
		return NULL;
	}
	return env;
}

static void child_cb(struct ev_loop *loop, ev_child *w, int revents)
{
	int st = w->rstatus;

	ev_child_stop(loop, w);
	child_done(loop, WIFEXITED(st) ? WEXITSTATUS(st) :
		   WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1);
}

bool run_running(void)
{
	return ev_is_active(&child);
}

/*
 * In the child: take @c (only calls safe after fork in a threaded
 * process: the group list was read before).  0 or an errno.
 */
static int child_creds(const struct run_creds *c)
{
	if (!c || !c->set)
		return 0;
	if (setgroups(c->nr_groups, c->groups) || setgid(c->gid) ||
	    (c->set_uid && setuid(c->uid)))
		return errno;
	/* A setuid that did not take must not run the command as root. */
	if (c->set_uid && c->uid != 0 && (setuid(0) == 0 || geteuid() == 0))
		return EPERM;
	return 0;
}

/* The write end of the pipe the child waits on until run_go. */
static int go_fd = -1;

/*
 * The child: its own group, USER's ids at once (while the server is
 * still root, so USER's process limit, counted without the server's
 * threads, lets it exist), the result to @status, then wait for @go.
 */
static void __attribute__((noreturn))
child_main(char *const argv[], char *const env[],
	   const struct run_creds *creds, int status, int go)
{
	sigset_t none;
	int e;
	char c;
	ssize_t n;

	/*
	 * The server's handlers are no use here, and one run while waiting
	 * would poke the server's loop and leave this child waiting on: a
	 * stopping signal now ends it, as it did when exec came at once.
	 */
	for (int s = 1; s < NSIG; s++) {
		struct sigaction sa;

		if (s != SIGKILL && s != SIGSTOP && !sigaction(s, NULL, &sa) &&
		    !(sa.sa_flags & SA_SIGINFO) && sa.sa_handler != SIG_IGN &&
		    sa.sa_handler != SIG_DFL)
			signal(s, SIG_DFL);
	}
	if (own_group)
		setpgid(0, 0);
	e = child_creds(creds);
	if (e) {
		(void)!write(status, &e, sizeof(e));
		_exit(126);
	}
	close(status); /* EOF: the parent goes on */
	while ((n = read(go, &c, 1)) < 0 && errno == EINTR)
		;
	if (n != 1)
		_exit(127); /* the server's start failed */
	/* The command gets the signal state a shell would. */
	sigemptyset(&none);
	signal(SIGPIPE, SIG_DFL);
	sigprocmask(SIG_SETMASK, &none, NULL);
	execve("/bin/sh", argv, env);
	_exit(127);
}

int run_start(struct ev_loop *loop, const char *cmd, const struct run_addr *a,
	      const struct run_creds *creds,
	      void (*done)(struct ev_loop *loop, int status))
{
	char *argv[] = { "sh", "-c", (char *)cmd, NULL };
	int go[2] = { -1, -1 }, st[2] = { -1, -1 }, e = 0, r = 0;
	size_t mine;
	char **env = run_env(a, &mine);
	ssize_t n;
	pid_t pid;

	if (!env)
		return -ENOMEM;
	if (pipe2(go, O_CLOEXEC) || pipe2(st, O_CLOEXEC)) {
		r = -errno;
		goto out;
	}
	own_group = !isatty(STDIN_FILENO);
	pid = fork();
	if (pid < 0) {
		r = -errno;
		goto out;
	}
	if (pid == 0) {
		close(go[1]);
		close(st[0]);
		child_main(argv, env, creds, st[1], go[0]);
	}
	/* Both sides: whichever runs first, a signal finds the group. */
	if (own_group)
		setpgid(pid, pid);
	close(st[1]);
	st[1] = -1;
	while ((n = read(st[0], &e, sizeof(e))) < 0 && errno == EINTR)
		;
	if (n != 0) {
		r = n == (ssize_t)sizeof(e) ? -e : -EIO;
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		goto out;
	}
	go_fd = go[1];
	go[1] = -1;
	child_done = done;
	child_loop = loop;
	ev_child_init(&child, child_cb, pid, 0);
	ev_child_start(loop, &child);
out:
	for (int i = 0; i < 2; i++) {
		if (go[i] >= 0)
			close(go[i]);
		if (st[i] >= 0)
			close(st[i]);
	}
	env_free(env, mine);
	return r;
}

void run_go(void)
{
	/* A child gone meanwhile gets EPIPE here; its watcher says so. */
	if (go_fd >= 0) {
		(void)!write(go_fd, "g", 1);
		close(go_fd);
		go_fd = -1;
	}
}

static void run_kill(int sig)
{
	(void)kill(own_group ? -child.pid : child.pid, sig);
}

bool run_signal(int sig)
{
	if (!run_running())
		return false;
	/*
	 * In the terminal's group, a key's SIGINT or SIGQUIT reached the
	 * command already, and a second one means "abort now" to many; one
	 * sent by kill(1) to us alone is made up for by run_finish's SIGTERM.
	 */
	if (!own_group && (sig == SIGINT || sig == SIGQUIT))
		return false;
	run_kill(sig);
	signalled = true;
	return true;
}

/* Anything of the command left: the leader unreaped, or its group. */
static bool run_left(bool *reaped)
{
	int st;

	if (!*reaped) {
		pid_t r = waitpid(child.pid, &st, WNOHANG);

		*reaped = r == child.pid || (r < 0 && errno == ECHILD);
	}
	if (!*reaped)
		return true;
	return own_group && kill(-child.pid, 0) == 0;
}

void run_finish(unsigned int grace_ms)
{
	bool reaped = false;
	int st;

	if (!run_running())
		return;
	/* The loop is over: nobody else reaps it now. */
	ev_child_stop(child_loop, &child);
	if (!signalled)
		run_kill(SIGTERM);
	/*
	 * The whole group: a shell's background children ignore SIGINT and
	 * SIGQUIT, and outlive a shell that a signal ended.
	 */
	for (unsigned int ms = 0; ms < grace_ms; ms += 10) {
		if (!run_left(&reaped))
			return;
		usleep(10000);
	}
	nbdl_log(NBDL_ERROR,
		 "the --run command (pid %d) is still running %u ms after the "
		 "signal: killing it",
		 child.pid, grace_ms);
	run_kill(SIGKILL);
	while (!reaped && waitpid(child.pid, &st, 0) < 0 && errno == EINTR)
		;
}
