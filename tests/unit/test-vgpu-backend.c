/*
 * test-vgpu-backend -- choosing a VRAM backend: names, device numbers,
 * and the CUDA backend's refusal on a machine where it cannot run (no
 * NVIDIA driver, or a build without CUDA kernels) with a message that
 * says which.  Runs everywhere: no GPU is needed.
 */
#include <errno.h>
#include <glib.h>
#include <stdlib.h>
#include <string.h>

#include "vgpu/backend.h"
#include "vgpu/cuda-fatbin.h"

static void test_names(void)
{
    static const char *const bad[] = {
        "gpu",      "cuda:",   "cuda:x", "cuda:-1", "cuda:+1",
        "cuda:256", "cuda:1x", "",       "cpu:0",   "cudax"};
    struct vgpu_backend *be = NULL;
    struct vg_error err = {0};

    for (unsigned i = 0; i < G_N_ELEMENTS(bad); i++) {
        g_assert_cmpint(vgpu_backend_open(bad[i], 1u << 20, &be, &err), ==,
                        -EINVAL);
        g_assert_nonnull(strstr(err.msg, "unknown VRAM backend"));
        g_assert_nonnull(strstr(err.msg, bad[i]));
    }
    g_assert_cmpint(vgpu_backend_open("cpu", 1u << 20, &be, &err), ==, 0);
    g_assert_nonnull(be->base);
    g_assert_cmpint(be->fd, >=, 0);
    vgpu_backend_close(be);
}

/* With a libcuda path that does not exist, "cuda" fails cleanly and says
 * why: no kernels in this build, or no NVIDIA driver. */
static void test_cuda_without_driver(void)
{
    struct vgpu_backend *be = NULL;
    struct vg_error err = {0};
    int ret;

    g_setenv("VGMIG_LIBCUDA", "/nonexistent/libcuda.so.1", TRUE);
    ret = vgpu_backend_open("cuda:3", 1u << 20, &be, &err);
    g_unsetenv("VGMIG_LIBCUDA");
    g_test_message("cuda backend: %s", err.msg);
    g_assert_null(be);
    g_assert_nonnull(strstr(err.msg, "VRAM backend 'cuda'"));
    if (vgc_fatbin_size == 0) {
        g_assert_cmpint(ret, ==, -ENOTSUP);
        g_assert_nonnull(strstr(err.msg, "without CUDA"));
    } else {
        g_assert_cmpint(ret, ==, -ENOENT);
        g_assert_nonnull(strstr(err.msg, "no NVIDIA driver"));
        g_assert_nonnull(strstr(err.msg, "/nonexistent/libcuda.so.1"));
    }
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/backend/names", test_names);
    g_test_add_func("/backend/cuda-without-driver", test_cuda_without_driver);
    return g_test_run();
}
