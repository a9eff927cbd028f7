/* logfmt logs on stderr: ts=... level=... msg="..." key=value ... */
#ifndef PT_LOG_H
#define PT_LOG_H

enum { PT_LOG_DEBUG, PT_LOG_INFO, PT_LOG_WARN, PT_LOG_ERROR };

/* Returns -1 for an unknown level name. */
int pt_log_set_level(const char *name);
int pt_log_enabled(int level);
/* kv is a printf format for the key=value pairs after msg ("" for none); string values
 * that may hold spaces or quotes should go through pt_log_quote(). */
void pt_log(int level, const char *msg, const char *kv, ...)
    __attribute__((format(printf, 3, 4)));

/* A line with no key=value pairs. */
#define pt_log_msg(level, msg) pt_log((level), (msg), "%s", "")

/* Quotes s for logfmt into buf (always quoted, escapes " \ and control bytes). */
const char *pt_log_quote(char *buf, unsigned long cap, const char *s, unsigned long n);

#endif
