/*
 * replay.c -- run a fuzz target's corpus as a regression test.
 *
 * Linked with one tests/fuzz/fuzz-<name>.c instead of libFuzzer, built
 * with the normal compiler (and with ASan/UBSan under `make
 * check-sanitize`).  Without arguments it runs every file of the corpus
 * directory compiled in (FUZZ_CORPUS, tests/fuzz/corpus/<name>) and prints
 * TAP, one test per file, for prove.  With arguments it runs those files
 * (or the files of those directories) instead, e.g. a crash input that
 * `make fuzz` saved.  A crash, a sanitizer report or a failed check in the
 * target ends the process: prove reports the file it was running.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

#ifndef FUZZ_CORPUS
#error "FUZZ_CORPUS must name the corpus directory"
#endif

struct list {
    char **v;
    size_t n, cap;
};

static void add(struct list *l, const char *path)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->v = realloc(l->v, l->cap * sizeof(*l->v));
        if (!l->v) {
            perror("replay");
            exit(2);
        }
    }
    l->v[l->n] = strdup(path);
    if (!l->v[l->n]) {
        perror("replay");
        exit(2);
    }
    l->n++;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* @path's regular files if it is a directory, else @path itself. */
static void collect(struct list *l, const char *path)
{
    struct dirent *e;
    struct stat st;
    DIR *d;

    if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode)) {
        add(l, path);
        return;
    }
    d = opendir(path);
    if (!d) {
        add(l, path); /* reported as unreadable below */
        return;
    }
    while ((e = readdir(d))) {
        char *p;
        if (e->d_name[0] == '.') {
            continue;
        }
        if (asprintf(&p, "%s/%s", path, e->d_name) < 0) {
            exit(2);
        }
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
            add(l, p);
        }
        free(p);
    }
    closedir(d);
}

/* Read all of @path; NULL with errno set on failure. */
static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    size_t cap = 0, n = 0;

    if (!f) {
        return NULL;
    }
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                errno = ENOMEM;
                return NULL;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            break;
        }
    }
    if (ferror(f)) {
        free(buf);
        fclose(f);
        errno = EIO;
        return NULL;
    }
    fclose(f);
    *len = n;
    return buf;
}

int main(int argc, char **argv)
{
    struct list files = {0};
    int failed = 0;

    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("Usage: %s [FILE|DIR]...\n"
               "Run fuzz inputs through this fuzz target, one TAP test per "
               "file.\n"
               "Without arguments: every file of %s.\n"
               "A crash or a failed check ends the run; the last '# running' "
               "line names\nthe input.  Exit status 0 if every input ran, 1 "
               "otherwise.\n",
               argv[0], FUZZ_CORPUS);
        return 0;
    }
    if (argc > 1) {
        for (int i = 1; i < argc; i++) {
            collect(&files, argv[i]);
        }
    } else {
        collect(&files, FUZZ_CORPUS);
    }
    qsort(files.v, files.n, sizeof(*files.v), by_name);
    if (files.n == 0) {
        printf("1..1\nnot ok 1 - no inputs in %s\n",
               argc > 1 ? "the arguments" : FUZZ_CORPUS);
        return 1;
    }
    printf("1..%zu\n", files.n);
    for (size_t i = 0; i < files.n; i++) {
        size_t len = 0;
        uint8_t *buf = slurp(files.v[i], &len);

        if (!buf) {
            printf("not ok %zu - %s: %s\n", i + 1, files.v[i], strerror(errno));
            failed = 1;
            free(files.v[i]);
            continue;
        }
        printf("# running %s (%zu bytes)\n", files.v[i], len);
        fflush(stdout);
        LLVMFuzzerTestOneInput(buf, len);
        printf("ok %zu - %s\n", i + 1, files.v[i]);
        fflush(stdout);
        free(buf);
        free(files.v[i]);
    }
    free(files.v);
    return failed;
}
