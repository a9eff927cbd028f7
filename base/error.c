#include "error.h"

const char *pt_strerror(int rv)
{
    switch (rv) {
    case PT_OK: return "success";
    case PT_EBADREQ: return "bad request";
    case PT_ESNAPPY: return "invalid snappy block";
    case PT_EPROTO: return "invalid protobuf message";
    case PT_ELABELS: return "invalid label set";
    case PT_ETOOLARGE: return "request too large";
    case PT_EMEDIATYPE: return "unsupported media type";
    case PT_ENOTFOUND: return "not found";
    case PT_EMETHOD: return "method not allowed";
    case PT_EREGEX: return "invalid regular expression";
    case PT_ELIMIT: return "query limit exceeded";
    case PT_EUNSUPPORTED: return "not supported";
    case PT_EUNAUTHORIZED: return "unauthorized";
    case PT_EHEADERS: return "request header fields too large";
    case PT_EVERSION: return "HTTP version not supported";
    case PT_ETENANTLIMIT: return "tenant limit reached";
    case PT_EREQTIMEOUT: return "request timeout";
    case PT_EREGEXLIMIT: return "regular expression over its match limits";
    case PT_EUNAVAIL: return "storage unavailable";
    case PT_ETIMEOUT: return "storage timed out";
    case PT_EBUSY: return "server busy";
    case PT_ECANCELLED: return "the client went away";
    case PT_ENOSPACE: return "storage disk full";
    case PT_EINTERNAL: return "internal error";
    case PT_ENOMEM: return "out of memory";
    case PT_EIO: return "storage I/O error";
    }
    if (PT_IS_BAD_INPUT(rv))
        return "bad request";
    if (PT_IS_RETRYABLE(rv))
        return "temporarily unavailable";
    return "internal error";
}

int pt_error_http_status(int rv)
{
    switch (rv) {
    case PT_ETOOLARGE: return 413;
    case PT_EMEDIATYPE: return 415;
    case PT_ENOTFOUND: return 404;
    case PT_EMETHOD: return 405;
    case PT_EUNAUTHORIZED: return 401;
    case PT_EHEADERS: return 431;
    case PT_ETENANTLIMIT: return 429;
    case PT_EREQTIMEOUT: return 408;
    case PT_EREGEXLIMIT: return 422;
    default: break;
    }
    if (PT_IS_BAD_INPUT(rv))
        return 400;
    if (PT_IS_RETRYABLE(rv))
        return 503;
    return 500;
}
