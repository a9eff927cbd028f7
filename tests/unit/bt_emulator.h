/* The Bigtable emulator (cbtemulator) for the bigtable test programs
 * (t_bigtable_conformance.c, t_bigtable_streams.c): a process started on a free loopback
 * port and always killed at exit, and helpers to open the backend on it. */
#ifndef PT_TEST_BT_EMULATOR_H
#define PT_TEST_BT_EMULATOR_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tap.h"
#include "conformance.h"
#include "bigtable.h"
#include "bigtable_int.h"
#include "log.h"

extern const pt_backend_ops pt_backend_bigtable;


#define DEFAULT_EMULATOR "/usr/lib/google-cloud-sdk/platform/bigtable-emulator/cbtemulator"

/* ---- the emulator process ---- */

static const char *emu_path;
static volatile sig_atomic_t emu_pid; /* 0 = not running */
static int emu_port;

static inline double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static inline void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static inline void emu_stop(void)
{
    pid_t pid = (pid_t)emu_pid;
    if (pid <= 0)
        return;
    emu_pid = 0;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* Async-signal-safe: kill the emulator, then die of the same signal. */
static inline void on_fatal_signal(int sig)
{
    pid_t pid = (pid_t)emu_pid;
    if (pid > 0)
        kill(pid, SIGKILL);
    signal(sig, SIG_DFL);
    raise(sig);
}

static inline int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static inline int connect_port(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Starts the emulator on port and waits until it accepts connections. */
static inline int emu_start(int port)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        /* Die with the test, even if it is killed with SIGKILL. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) {
            dup2(null, 0);
            dup2(null, 1);
            dup2(null, 2);
        }
        char p[16];
        snprintf(p, sizeof(p), "%d", port);
        execl(emu_path, "cbtemulator", "-host", "127.0.0.1", "-port", p, (char *)NULL);
        _exit(127);
    }
    emu_pid = pid;
    for (double t0 = now_ms(); now_ms() - t0 < 20000;) {
        int fd = connect_port(port);
        if (fd >= 0) {
            close(fd);
            return 0;
        }
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            emu_pid = 0;
            return -1;
        }
        sleep_ms(50);
    }
    emu_stop();
    return -1;
}

/* ---- helpers ---- */

static inline int open_bt(pt_backend *b, const char *endpoint, const char *prefix,
                          long retention, char *err, size_t errlen)
{
    pt_bigtable_conf bc = {.project = "proj",
                           .instance = "inst",
                           .endpoint = (char *)endpoint,
                           .table_prefix = (char *)prefix};
    pt_backend_config cfg = {.own = &bc, .retention_seconds = retention};
    return pt_backend_open(b, &pt_backend_bigtable, &cfg, err, errlen);
}

static inline int init_bt(pt_backend *b, char *err, size_t errlen)
{
    return b->ops->init(b->state, err, errlen);
}

static inline int write1(pt_backend *b, pt_table t, const char *row, uint32_t q, const char *value)
{
    ct_batch bt = {0};
    ct_add(&bt, t, row, q, value);
    return ct_write(b, &bt);
}

static inline pt_bt_stats stats(pt_backend *b)
{
    pt_bt_stats st;
    pt_bt_get_stats(b->state, &st);
    return st;
}

/* The figure the backend's stats op (what /metrics shows) reports under name, or -1
 * when it reports none. */
static inline double bt_metric(pt_backend *b, const char *name)
{
    pt_backend_stat st[64];
    size_t n = b->ops->stats ? b->ops->stats(b->state, st, sizeof(st) / sizeof(st[0])) : 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(st[i].name, name) == 0)
            return st[i].value;
    return -1;
}

/* What a bigtable test program does first: without the emulator binary
 * ($PT_CBTEMULATOR, else DEFAULT_EMULATOR) it prints a TAP skip and returns 1; else it
 * sets the watchdog and the log level, starts the emulator and writes its address in
 * endpoint (returns 0), or fails a test and returns -1. */
static inline int bt_emulator_setup(char *endpoint, size_t n)
{
    emu_path = getenv("PT_CBTEMULATOR") ? getenv("PT_CBTEMULATOR") : DEFAULT_EMULATOR;
    if (access(emu_path, X_OK) != 0) {
        printf("1..0 # SKIP cbtemulator not installed\n");
        return 1;
    }
    atexit(emu_stop);
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGABRT, SIGSEGV, SIGALRM};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        signal(sigs[i], on_fatal_signal);
    alarm(600); /* a watchdog: a hang fails the test instead of the CI job */
    /* The outage cases log warnings by design; PT_LOG_LEVEL=warn shows them. */
    pt_log_set_level(getenv("PT_LOG_LEVEL") ? getenv("PT_LOG_LEVEL") : "error");
    emu_port = free_port();
    if (emu_port < 0 || emu_start(emu_port) != 0) {
        ok(0, "start %s", emu_path);
        return -1;
    }
    snprintf(endpoint, n, "127.0.0.1:%d", emu_port);
    diag("cbtemulator on %s", endpoint);
    return 0;
}

#endif
