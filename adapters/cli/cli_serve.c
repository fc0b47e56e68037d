/* autocompress serve: the built-in inference server (adapters/server). */
#include "cli.h"
#include "cli_args.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "server/srv.h"
#include "autocompress/probe.h"

static int usage(const char *message)
{
    fprintf(stderr, "autocompress serve: %s\n", message);
    fprintf(stderr, "usage: autocompress serve --model DIR [--config server.cfg] [--host ADDR] [--port N]\n"
                    "                          [--slots N] [--threads N] [--port-file FILE]\n"
                    "admin endpoints need admin_token in the config or AUTOCOMPRESS_ADMIN_TOKEN\n");
    return 2;
}

typedef struct {
    const char *model, *config, *port_file;
    const char *host;
    long long port, slots, threads;
} serve_args;

static int parse(int argc, char **argv, serve_args *a)
{
    *a = (serve_args){.port = -1, .slots = -1, .threads = -1};
    for (int i = 1; i < argc; i++) {
        int missing = 0;
        const char *v;
        ac_status st = AC_OK;
        if ((v = cli_flag_value(argc, argv, &i, "--model", &missing)))
            a->model = v;
        else if ((v = cli_flag_value(argc, argv, &i, "--config", &missing)))
            a->config = v;
        else if ((v = cli_flag_value(argc, argv, &i, "--host", &missing)))
            a->host = v;
        else if ((v = cli_flag_value(argc, argv, &i, "--port-file", &missing)))
            a->port_file = v;
        else if ((v = cli_flag_value(argc, argv, &i, "--port", &missing)))
            st = cli_parse_int("--port", v, 0, 65535, &a->port);
        else if ((v = cli_flag_value(argc, argv, &i, "--slots", &missing)))
            st = cli_parse_int("--slots", v, 1, 256, &a->slots);
        else if ((v = cli_flag_value(argc, argv, &i, "--threads", &missing)))
            st = cli_parse_int("--threads", v, 0, 1024, &a->threads);
        else if (!missing) {
            char message[256];
            snprintf(message, sizeof message, "unknown argument '%s'", argv[i]);
            return usage(message);
        }
        if (missing)
            return usage("a flag is missing its value");
        if (st != AC_OK)
            return usage(ac_error_message());
    }
    return a->model ? 0 : usage("--model is required");
}

static int configure(const serve_args *a, srv_config *c)
{
    srv_config_defaults(c);
    if (a->config && srv_config_load(a->config, c) != AC_OK) {
        fprintf(stderr, "autocompress serve: %s\n", ac_error_message());
        return 2;
    }
    if (a->host) {
        if (strlen(a->host) >= sizeof c->host)
            return usage("--host is too long");
        snprintf(c->host, sizeof c->host, "%s", a->host);
    }
    if (a->port >= 0)
        c->port = (int)a->port;
    if (a->slots > 0)
        c->slots = (int)a->slots;
    if (a->threads >= 0)
        c->threads = (int)a->threads;
    srv_config_apply_env(c);
    return 0;
}

static int write_port_file(const char *path, int port)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    int ok = f && fprintf(f, "%d\n", port) >= 0;
    if (f && fclose(f) != 0)
        ok = 0;
    return ok && rename(tmp, path) == 0 ? 0 : 1;
}

int cli_serve(int argc, char **argv)
{
    serve_args a;
    srv_config cfg;
    int rc = parse(argc, argv, &a);
    if (!rc)
        rc = configure(&a, &cfg);
    if (rc)
        return rc;
    /* every thread inherits the blocked signals; this one takes them with sigwait */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    srv_metrics *metrics = NULL;
    srv_server *server = NULL;
    srv_http *http = NULL;
    int port = 0;
    ac_status st = srv_metrics_create(cfg.slots, &metrics);
    if (st == AC_OK)
        st = srv_server_create(&cfg, metrics, &server);
    if (st == AC_OK)
        st = srv_http_start(server, metrics, &http, &port);
    if (st == AC_OK) {
        fprintf(stderr, "autocompress serve: listening on http://%s:%d (admin %s)\n", cfg.host, port,
                cfg.admin_token[0] ? "enabled" : "disabled: no token");
        if (a.port_file && write_port_file(a.port_file, port))
            st = ac_fail(AC_ERR_IO, "cannot write the port file %s", a.port_file);
    }
    int64_t t0 = ac_monotonic_ns();
    if (st == AC_OK)
        st = srv_server_load_initial(server, a.model);
    if (st == AC_OK) {
        char name[SRV_NAME_MAX];
        srv_server_model_name(server, name, sizeof name);
        fprintf(stderr, "autocompress serve: model %s loaded in %.2f s; ready\n", name,
                1e-9 * (double)(ac_monotonic_ns() - t0));
        int sig = 0;
        sigwait(&stop_signals, &sig);
        fprintf(stderr, "autocompress serve: signal %d, stopping\n", sig);
    } else {
        fprintf(stderr, "autocompress serve: %s\n", ac_error_message());
    }
    srv_server_stop(server);
    srv_http_stop(http);
    srv_server_free(server);
    srv_metrics_free(metrics);
    return st == AC_OK ? 0 : 1;
}
