/*
 * report-text.c -- text from outside put into JSON and Markdown reports
 * (report-text.h).
 */
#include "report-text.h"

#include <glib.h>
#include <stdbool.h>
#include <string.h>

char *report_json_text(const char *s)
{
    GString *out = g_string_sized_new(strlen(s) + 8);

    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"':
            g_string_append(out, "\\\"");
            break;
        case '\\':
            g_string_append(out, "\\\\");
            break;
        case '\n':
            g_string_append(out, "\\n");
            break;
        case '\t':
            g_string_append(out, "\\t");
            break;
        default:
            if (*p < 0x20 || *p == 0x7f) {
                g_string_append_printf(out, "\\u%04x", *p);
            } else {
                g_string_append_c(out, (char)*p);
            }
        }
    }
    return g_string_free(out, FALSE);
}

char *report_md_cell(const char *s)
{
    GString *out = g_string_sized_new(strlen(s) + 8);
    bool gap = false;

    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p < 0x20 || *p == 0x7f) {
            gap = true;
            continue;
        }
        if (gap && out->len) {
            g_string_append_c(out, ' ');
        }
        gap = false;
        if (*p == '|') {
            g_string_append_c(out, '\\');
        }
        g_string_append_c(out, (char)*p);
    }
    return g_string_free(out, FALSE);
}
