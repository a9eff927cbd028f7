/*
 * One error space for the whole daemon. Codes are negative and grouped by range so a
 * caller can tell what to do without knowing every code:
 *   -1   .. -99   bad input: the peer sent something we will never accept (HTTP 4xx)
 *   -100 .. -199  retryable: an outage or a timeout; the peer should try again (HTTP 503)
 *   -200 ..       fatal: a bug or resource exhaustion inside this process (HTTP 500)
 * pt_error_http_status() is the only place that turns a code into an HTTP status.
 */
#ifndef PT_ERROR_H
#define PT_ERROR_H

enum {
    PT_OK = 0,

    PT_EBADREQ = -1,      /* malformed request (protobuf, labels, timestamps) */
    PT_ESNAPPY = -2,      /* body is not valid snappy block format */
    PT_EPROTO = -3,       /* body is not a valid protobuf message */
    PT_ELABELS = -4,      /* invalid label set */
    PT_ETOOLARGE = -5,    /* over a configured size limit (413) */
    PT_EMEDIATYPE = -6,   /* unsupported content type or encoding (415) */
    PT_ENOTFOUND = -7,    /* no such route (404) */
    PT_EMETHOD = -8,      /* method not allowed on this route (405) */
    PT_EREGEX = -9,       /* invalid regular expression in a matcher */
    PT_ELIMIT = -10,      /* a query exceeded a series/sample limit */
    PT_EUNSUPPORTED = -11, /* valid, but a form promtable does not handle (a remote
                            * read response type, a histogram no chunk holds exactly) */
    PT_EUNAUTHORIZED = -12,
    PT_EHEADERS = -13,    /* request header fields over the limit (431) */
    PT_EVERSION = -14,    /* HTTP version other than 1.0 and 1.1 (400, not 505: bad input) */
    PT_ETENANTLIMIT = -15, /* over a tenant's limit (429; tenancy.*) */
    PT_EREQTIMEOUT = -16, /* the client sent its request too slowly (408) */
    PT_EREGEXLIMIT = -17, /* a regex matcher ran into its match limits on a value (422) */

    PT_EUNAVAIL = -100,   /* backend unavailable */
    PT_ETIMEOUT = -101,   /* backend timed out */
    PT_EBUSY = -102,      /* overloaded: try again later */
    PT_ECANCELLED = -103, /* the client went away; nobody waits for the answer */
    PT_ENOSPACE = -104,   /* the disk holding the store is full; writes resume once space is
                             freed (503: nothing is lost, the client retries) */

    PT_EINTERNAL = -200,  /* invariant broken, backend corruption */
    PT_ENOMEM = -201,
    PT_EIO = -202,        /* local I/O error on the embedded store */
};

#define PT_IS_BAD_INPUT(rv) ((rv) < 0 && (rv) > -100)
#define PT_IS_RETRYABLE(rv) ((rv) <= -100 && (rv) > -200)
#define PT_IS_FATAL(rv) ((rv) <= -200)

/* A static string naming the code; never NULL. */
const char *pt_strerror(int rv);

/* The HTTP status that answers a request which failed with rv (rv < 0). */
int pt_error_http_status(int rv);

#endif
