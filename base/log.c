#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static int min_level = PT_LOG_INFO;
static const char *const names[] = {"debug", "info", "warn", "error"};

int pt_log_set_level(const char *name)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(name, names[i]) == 0) {
            min_level = i;
            return 0;
        }
    return -1;
}

int pt_log_enabled(int level) { return level >= min_level; }

const char *pt_log_quote(char *buf, unsigned long cap, const char *s, unsigned long n)
{
    unsigned long o = 0;
    if (cap < 3)
        return "";
    buf[o++] = '"';
    for (unsigned long i = 0; i < n && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            buf[o++] = '\\';
            buf[o++] = (char)c;
        } else if (c < 0x20) {
            o += (unsigned long)snprintf(buf + o, cap - o, "\\x%02x", c);
        } else {
            buf[o++] = (char)c;
        }
    }
    buf[o++] = '"';
    buf[o] = '\0';
    return buf;
}

void pt_log(int level, const char *msg, const char *kv, ...)
{
    if (level < min_level)
        return;
    char line[2048], q[512];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int o = snprintf(line, sizeof(line), "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s msg=%s",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, names[level],
                     pt_log_quote(q, sizeof(q), msg, strlen(msg)));
    if (kv[0] && o > 0 && (size_t)o < sizeof(line) - 2) {
        line[o++] = ' ';
        va_list ap;
        va_start(ap, kv);
        int n = vsnprintf(line + o, sizeof(line) - (size_t)o, kv, ap);
        va_end(ap);
        if (n > 0)
            o += n;
        else
            o--; /* nothing after msg: drop the space */
    }
    if (o < 0)
        return;
    if ((size_t)o >= sizeof(line) - 1)
        o = (int)sizeof(line) - 2;
    line[o++] = '\n';
    fwrite(line, 1, (size_t)o, stderr); /* one write per line: lines never interleave */
}
