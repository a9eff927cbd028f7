/*
 * The JSON writer the HTTP API's answers are made with: strings escaped for JSON text,
 * appended to a pt_buf (which keeps its ceiling).
 */
#ifndef PT_JSON_H
#define PT_JSON_H

#include "buf.h"
#include "slice.h"

/* Appends s as a JSON string: '"' and '\' escaped with a backslash; \n, \r, \t, \b and \f
 * as those escapes and every other byte below 0x20, and 0x7f, as \u00XX (lowercase hex);
 * everything else as it is when s is valid UTF-8, else each byte that does not start a
 * valid UTF-8 sequence replaced by U+FFFD. 0 or the buffer's error (PT_ENOMEM,
 * PT_ETOOLARGE past its ceiling); after an error b holds a partial string. */
int pt_json_str(pt_buf *b, pt_slice s);

#endif
