/*
 * report-text.h -- text from outside (error messages of QEMU, the servers
 * and the system) put into vgmig-bench's reports without breaking them:
 * a JSON string's content, and one cell of a Markdown table row.
 */
#ifndef VGMIG_BENCH_REPORT_TEXT_H
#define VGMIG_BENCH_REPORT_TEXT_H

/* @s as the content of a JSON string (without the quotes): '"' and '\'
 * escaped, control characters as \n, \t or \u00XX.  g_free() it. */
char *report_json_text(const char *s);

/* @s as one Markdown table cell: on one line (each run of control
 * characters, a line break too, becomes one space) and '|' escaped.
 * g_free() it. */
char *report_md_cell(const char *s);

#endif
