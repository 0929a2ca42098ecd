/*
 * Description: bionbd's one setter for its own settings (server/options.c),
 * which the [server] section of a config file and the command-line flags
 * both go through: every key with good values, the edges of each range,
 * refused values leave the setting as it was and say why without naming
 * the key (callers add the key or the flag), later values win, unknown keys
 * are -ENOENT; the handshake time limit and the connection limit; and
 * every [server] key conf/example.conf ships is accepted.
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <bionbd/config.h>

#include "options.h"
#include "unit.h"

static char why[256];

static int set(struct srv_options *o, const char *key, const char *value)
{
	why[0] = '\0';
	return srv_option_set(o, key, value, why, sizeof(why));
}

int main(void)
{
	struct srv_options o;

	srv_options_init(&o);
	CHECK(!o.listen && !o.port && !o.socket && !o.threads);
	CHECK_EQ(o.backend, IOQ_IO_URING);
	CHECK(!o.backend_set);
	CHECK_EQ(o.poll_us, SRV_DEFAULT_POLL_US);

	CHECK_EQ(set(&o, "listen", "::1"), 0);
	CHECK(!strcmp(o.listen, "::1"));
	CHECK_EQ(set(&o, "listen", "127.0.0.2"), 0); /* the later one wins */
	CHECK(!strcmp(o.listen, "127.0.0.2"));
	CHECK_EQ(set(&o, "listen", ""), -EINVAL);
	CHECK(strstr(why, "empty"));
	CHECK(!strcmp(o.listen, "127.0.0.2"));

	CHECK_EQ(set(&o, "socket", "/run/s.sock"), 0);
	CHECK(!strcmp(o.socket, "/run/s.sock"));

	CHECK_EQ(set(&o, "port", "1"), 0);
	CHECK_EQ(set(&o, "port", "65535"), 0);
	CHECK(!strcmp(o.port, "65535"));
	CHECK_EQ(set(&o, "port", "0"), -EINVAL);
	CHECK(strstr(why, "1..65535") && !strstr(why, "port="));
	CHECK_EQ(set(&o, "port", "65536"), -EINVAL);
	CHECK_EQ(set(&o, "port", "80x"), -EINVAL);
	CHECK(!strcmp(o.port, "65535"));

	CHECK_EQ(set(&o, "threads", "1"), 0);
	CHECK_EQ(set(&o, "threads", "1024"), 0);
	CHECK_EQ(o.threads, 1024);
	CHECK_EQ(set(&o, "threads", "0"), -EINVAL);
	CHECK_EQ(set(&o, "threads", "1025"), -EINVAL);
	CHECK_EQ(o.threads, 1024);

	CHECK_EQ(set(&o, "backend", "aio"), -EINVAL);
	CHECK(!o.backend_set);
	CHECK_EQ(set(&o, "backend", "threads"), 0);
	CHECK_EQ(o.backend, IOQ_THREADS);
	CHECK(o.backend_set);
	CHECK_EQ(set(&o, "backend", "aio"), -EINVAL);
	CHECK(strstr(why, "io_uring or threads"));
	CHECK_EQ(o.backend, IOQ_THREADS);
	CHECK_EQ(set(&o, "backend", "io_uring"), 0);
	CHECK_EQ(o.backend, IOQ_IO_URING);

	CHECK_EQ(set(&o, "poll-us", "0"), 0);
	CHECK_EQ(o.poll_us, 0);
	CHECK_EQ(set(&o, "poll-us", "100000"), 0);
	CHECK_EQ(set(&o, "poll-us", "100001"), -EINVAL);
	CHECK_EQ(set(&o, "poll-us", "-1"), -EINVAL);
	CHECK_EQ(set(&o, "poll-us", "soon"), -EINVAL);
	CHECK_EQ(o.poll_us, 100000);

	CHECK_EQ(o.handshake_s, SRV_DEFAULT_HANDSHAKE_S);
	CHECK_EQ(set(&o, "handshake-timeout", "0"), 0); /* no limit */
	CHECK_EQ(o.handshake_s, 0);
	CHECK_EQ(set(&o, "handshake-timeout", "3600"), 0);
	CHECK_EQ(set(&o, "handshake-timeout", "3601"), -EINVAL);
	CHECK_EQ(set(&o, "handshake-timeout", "1.5"), -EINVAL);
	CHECK_EQ(o.handshake_s, 3600);

	CHECK_EQ(o.max_conns, SRV_DEFAULT_MAX_CONNS);
	CHECK_EQ(set(&o, "max-connections", "1"), 0);
	CHECK_EQ(set(&o, "max-connections", "0"), -EINVAL);
	CHECK_EQ(set(&o, "max-connections", "1000001"), -EINVAL);
	CHECK_EQ(o.max_conns, 1);

	CHECK(!o.memory_set);
	CHECK_EQ(set(&o, "memory", "512M"), 0);
	CHECK(o.memory_set);
	CHECK_EQ(o.memory_bytes, 512ull << 20);
	CHECK_EQ(set(&o, "memory", "0"), 0); /* cache nothing */
	CHECK_EQ(o.memory_bytes, 0);
	CHECK_EQ(set(&o, "memory", "2P"), -EINVAL);
	CHECK_EQ(set(&o, "memory", "lots"), -EINVAL);
	CHECK_EQ(o.memory_bytes, 0);

	/* Buffers in flight: two largest requests at least, a share each. */
	CHECK(!o.inflight_set);
	CHECK_EQ(set(&o, "inflight-memory", "64M"), 0);
	CHECK(o.inflight_set);
	CHECK_EQ(o.inflight_bytes, 64ull << 20);
	CHECK_EQ(set(&o, "inflight-memory", "4G"), 0);
	CHECK_EQ(o.inflight_bytes, 4ull << 30);
	CHECK_EQ(set(&o, "inflight-memory", "63M"), -EINVAL);
	CHECK_EQ(set(&o, "inflight-memory", "0"), -EINVAL);
	CHECK_EQ(set(&o, "inflight-memory", "2P"), -EINVAL);
	CHECK_EQ(set(&o, "inflight-memory", "lots"), -EINVAL);
	CHECK_EQ(o.inflight_bytes, 4ull << 30);

	CHECK(!o.async_min_set);
	CHECK_EQ(set(&o, "async-min", "256K"), 0);
	CHECK(o.async_min_set);
	CHECK_EQ(o.async_min, 256u << 10);
	CHECK_EQ(set(&o, "async-min", "0"), 0); /* never */
	CHECK_EQ(o.async_min, 0);
	CHECK_EQ(set(&o, "async-min", "32M"), 0);
	CHECK_EQ(set(&o, "async-min", "33M"), -EINVAL);
	CHECK(strstr(why, "32M"));
	CHECK_EQ(set(&o, "async-min", "1.5M"), -EINVAL);
	CHECK_EQ(o.async_min, 32u << 20);

	CHECK(!o.sendfile_min_set);
	CHECK_EQ(set(&o, "sendfile-min", "64K"), 0);
	CHECK(o.sendfile_min_set);
	CHECK_EQ(o.sendfile_min, 64u << 10);
	CHECK_EQ(set(&o, "sendfile-min", "0"), 0); /* never */
	CHECK_EQ(o.sendfile_min, 0);
	CHECK_EQ(set(&o, "sendfile-min", "40M"), -EINVAL);
	CHECK(strstr(why, "0 = never"));
	CHECK_EQ(o.sendfile_min, 0);
	CHECK_EQ(o.async_min, 32u << 20); /* its own field */

	CHECK(!o.log_set);
	CHECK_EQ(set(&o, "log", "syslog"), 0);
	CHECK(o.log_set && o.log == SRV_LOG_SYSLOG);
	CHECK_EQ(set(&o, "log", "null"), 0);
	CHECK_EQ(o.log, SRV_LOG_NULL);
	CHECK_EQ(set(&o, "log", "journal"), -EINVAL);
	CHECK(strstr(why, "stderr, syslog or null"));
	CHECK_EQ(o.log, SRV_LOG_NULL);

	CHECK_EQ(set(&o, "listen_addr", "x"), -ENOENT);
	CHECK(strstr(why, "unknown key"));

	srv_options_release(&o);
	CHECK(!o.listen && !o.socket && !o.port);

	/* Every [server] key of conf/example.conf is one bionbd takes. */
	{
		const char *slash = strrchr(__FILE__, '/');
		char path[4096], err[512];
		struct conf *c;

		snprintf(path, sizeof(path), "%.*s/../../conf/example.conf",
			 (int)(slash - __FILE__), __FILE__);
		CHECK_EQ(conf_load(&c, path, err, sizeof(err)), 0);
		CHECK(c->nr_server_keys >= 6);
		srv_options_init(&o);
		for (unsigned int i = 0; i < c->nr_server_keys; i++)
			CHECK_EQ(set(&o, c->server_keys[i].key,
				     c->server_keys[i].value),
				 0);
		srv_options_release(&o);
		conf_free(c);
	}
	printf("test-server-options: ok\n");
	return 0;
}
