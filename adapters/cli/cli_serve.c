/* autocompress serve: the built-in inference server (adapters/server). */
#include "cli.h"
#include "cli_opts.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "server/srv.h"
#include "server/srv_control.h"
#include "autocompress/clock.h"

typedef struct {
    const char *model, *config, *port_file;
    const char *host;
    const char *device;
    const char *weights;
    int port, slots, threads; /* -1: not given */
} serve_args;

static int parse_args(int argc, char **argv, serve_args *a)
{
    const cli_opt opts[] = {
        CLI_REQUIRED("model", &a->model, "DIR", "the checkpoint served first"),
        CLI_TEXT("config", &a->config, "FILE", "server settings (libconfig); the options below override them"),
        CLI_TEXT("host", &a->host, "ADDR", "IPv4 or IPv6 address to listen on (default: the config's, else 127.0.0.1)"),
        CLI_NUMBER("port", CLI_INT, &a->port, "N", "TCP port, 0: any free one (default: the config's, else 8080)", 0,
                   65535),
        CLI_NUMBER("slots", CLI_INT, &a->slots, "N", "sequences stepped together (default: the config's, else 8)", 1,
                   256),
        CLI_NUMBER("threads", CLI_INT, &a->threads, "N", "engine threads, 0: all cores (default: the config's, else 0)",
                   0, 1024),
        CLI_TEXT("device", &a->device, "cpu|cuda", "where the models run (default: the config's, else cpu)"),
        CLI_TEXT("weights", &a->weights, "f32|bf16",
                 "the product weights' dtype where the models run (default: the config's, else f32)"),
        CLI_TEXT("port-file", &a->port_file, "FILE", "write the bound port here once listening"),
    };
    const cli_spec spec = {"serve", NULL,
                           "Serves the checkpoint over HTTP: /v1/completions and /v1/models (OpenAI API),\n"
                           "/health, Prometheus /metrics, and /admin endpoints that swap the model while\n"
                           "requests run; the admin endpoints need admin_token in the config or\n"
                           "AUTOCOMPRESS_ADMIN_TOKEN. Logs to stderr; runs until SIGINT or SIGTERM, then\n"
                           "finishes the requests in flight (up to drain_timeout_s, default 30 s) and exits.\n"
                           "Done means stopped by a signal; a config file that is not valid is bad usage.\n"
                           CLI_EXIT_TEXT,
                           opts, CLI_COUNT(opts), 0, 0};
    int rc = cli_parse(&spec, argc, argv, NULL);
    if (rc == CLI_PARSED && a->host && strlen(a->host) >= sizeof((srv_config *)0)->host)
        rc = cli_usage_error(&spec, "--host is too long");
    if (rc == CLI_PARSED && a->device && strlen(a->device) >= sizeof((srv_config *)0)->device)
        rc = cli_usage_error(&spec, "--device is too long");
    return rc;
}

/* The defaults, the config file, then the options: CLI_PARSED, or CLI_EXIT_USAGE after a
 * bad config. */
static int configure(const serve_args *a, srv_config *c)
{
    srv_config_defaults(c);
    if (a->config && srv_config_load(a->config, c) != AC_OK) {
        fprintf(stderr, "autocompress serve: %s\n", ac_error_message());
        return CLI_EXIT_USAGE;
    }
    if (a->host)
        snprintf(c->host, sizeof c->host, "%s", a->host);
    if (a->port >= 0)
        c->port = a->port;
    if (a->slots > 0)
        c->slots = a->slots;
    if (a->threads >= 0)
        c->threads = a->threads;
    if (a->device)
        snprintf(c->device, sizeof c->device, "%s", a->device);
    if (a->weights && ac_weights_dtype_parse("--weights", a->weights, &c->weights) != AC_OK) {
        fprintf(stderr, "autocompress serve: %s\n", ac_error_message());
        return CLI_EXIT_USAGE;
    }
    srv_config_apply_env(c);
    return CLI_PARSED;
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

/* The controller runs this binary for its jobs. */
static ac_status start_control(srv_server *server, srv_metrics *metrics, const char *model, srv_control **control)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return ac_fail(AC_ERR_IO, "cannot find this program's path (/proc/self/exe): %s", strerror(errno));
    exe[n] = '\0';
    ac_status st = srv_control_create(server, metrics, exe, model, control);
    return st == AC_OK ? st : ac_fail_context(st, "the controller (the control and sla groups of the config)");
}

/* The SLA policy, with an sla group in the config: it starts jobs through the controller. */
static ac_status start_policy(srv_control *control, srv_metrics *metrics, const srv_config *cfg,
                              srv_policy **policy)
{
    ac_status st = srv_policy_create(control, metrics, cfg, policy);
    return st == AC_OK ? st : ac_fail_context(st, "the controller (the control and sla groups of the config)");
}

int cli_serve(int argc, char **argv)
{
    serve_args a = {.port = -1, .slots = -1, .threads = -1};
    srv_config cfg;
    int rc = parse_args(argc, argv, &a);
    if (rc == CLI_PARSED)
        rc = configure(&a, &cfg);
    if (rc != CLI_PARSED)
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
    srv_control *control = NULL;
    srv_policy *policy = NULL;
    int port = 0;
    ac_status st = srv_metrics_create(cfg.slots, &metrics);
    if (st == AC_OK)
        st = srv_server_create(&cfg, metrics, &server);
    /* jobs come from the admin API or the SLA policy: without either, no jobs directory */
    if (st == AC_OK && (cfg.admin_token[0] || cfg.sla.enabled))
        st = start_control(server, metrics, a.model, &control);
    if (st == AC_OK && cfg.sla.enabled)
        st = start_policy(control, metrics, &cfg, &policy);
    if (st == AC_OK)
        st = srv_http_start(server, metrics, control, policy, &http, &port);
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
        fprintf(stderr, "autocompress serve: signal %d: finishing the requests in flight (up to %g s)\n", sig,
                cfg.drain_timeout_s);
        int left = srv_http_drain(http, cfg.drain_timeout_s);
        if (left > 0)
            fprintf(stderr, "autocompress serve: %d requests still in flight at the deadline are cut\n", left);
        fprintf(stderr, "autocompress serve: stopping\n");
    } else {
        fprintf(stderr, "autocompress serve: %s\n", ac_error_message());
    }
    srv_server_stop(server);
    srv_http_stop(http);
    srv_policy_free(policy);
    srv_control_free(control); /* a running job stops and reads interrupted */
    srv_server_free(server);
    srv_metrics_free(metrics);
    return st == AC_OK ? CLI_EXIT_DONE : CLI_EXIT_FAILURE;
}
