/*
 * test-report-text -- vgmig-bench's reports keep their shape whatever an
 * error message holds (bench/report-text.c): quotes, backslashes and
 * line breaks in JSON strings, line breaks and '|' in Markdown cells.
 */
#include <glib.h>
#include <json-glib/json-glib.h>

#include "bench/report-text.h"

/* @text, put into a JSON document the way vgmig-bench does, parses back
 * to itself. */
static void assert_json_round_trip(const char *text)
{
    g_autofree char *esc = report_json_text(text);
    g_autofree char *doc = g_strdup_printf("{\"error\": \"%s\"}", esc);
    g_autoptr(JsonParser) parser = json_parser_new();
    GError *gerr = NULL;

    g_assert_true(json_parser_load_from_data(parser, doc, -1, &gerr));
    g_assert_no_error(gerr);
    g_assert_cmpstr(
        json_object_get_string_member(
            json_node_get_object(json_parser_get_root(parser)), "error"),
        ==, text);
}

static void test_json(void)
{
    g_autofree char *plain = report_json_text("no quotes here");

    g_assert_cmpstr(plain, ==, "no quotes here");
    assert_json_round_trip("");
    assert_json_round_trip("exec /tmp/q.sh: Permission denied\n");
    assert_json_round_trip("a \"quoted\" path C:\\dir\\file");
    assert_json_round_trip("tab\tbell\a escape\x1b del\x7f end");
    assert_json_round_trip("UTF-8 stays: \xc3\xa9t\xc3\xa9");
}

static void test_md(void)
{
    struct {
        const char *in, *out;
    } cases[] = {
        {"plain", "plain"},
        {"two\nlines\n", "two lines"},
        {"crlf\r\nand\t\ttabs", "crlf and tabs"},
        {"a | b", "a \\| b"},
        {"\nleading", "leading"},
        {"", ""},
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autofree char *got = report_md_cell(cases[i].in);

        g_assert_cmpstr(got, ==, cases[i].out);
    }
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/report-text/json", test_json);
    g_test_add_func("/report-text/md", test_md);
    return g_test_run();
}
