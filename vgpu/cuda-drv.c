/*
 * cuda-drv.c -- load the CUDA driver API with dlopen.
 */
#include "cuda-drv.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Symbol name and where its address goes; the _v2 names are the ones the
 * driver exports for the 64-bit variants. */
struct vgc_sym {
    const char *name;
    size_t offset;
};

#define SYM(field, name)                                                       \
    {                                                                          \
        name, offsetof(struct vgc_api, field)                                  \
    }

static const struct vgc_sym syms[] = {
    SYM(Init, "cuInit"),
    SYM(DriverGetVersion, "cuDriverGetVersion"),
    SYM(DeviceGetCount, "cuDeviceGetCount"),
    SYM(DeviceGet, "cuDeviceGet"),
    SYM(DeviceGetName, "cuDeviceGetName"),
    SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
    SYM(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
    SYM(CtxSetCurrent, "cuCtxSetCurrent"),
    SYM(MemAlloc, "cuMemAlloc_v2"),
    SYM(MemFree, "cuMemFree_v2"),
    SYM(MemAllocHost, "cuMemAllocHost_v2"),
    SYM(MemFreeHost, "cuMemFreeHost"),
    SYM(MemHostRegister, "cuMemHostRegister_v2"),
    SYM(MemHostUnregister, "cuMemHostUnregister"),
    SYM(MemsetD32Async, "cuMemsetD32Async"),
    SYM(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"),
    SYM(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
    SYM(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"),
    SYM(ModuleLoadData, "cuModuleLoadData"),
    SYM(ModuleUnload, "cuModuleUnload"),
    SYM(ModuleGetFunction, "cuModuleGetFunction"),
    SYM(LaunchKernel, "cuLaunchKernel"),
    SYM(StreamCreate, "cuStreamCreate"),
    SYM(StreamDestroy, "cuStreamDestroy_v2"),
    SYM(StreamSynchronize, "cuStreamSynchronize"),
    SYM(EventCreate, "cuEventCreate"),
    SYM(EventDestroy, "cuEventDestroy_v2"),
    SYM(EventRecord, "cuEventRecord"),
    SYM(EventSynchronize, "cuEventSynchronize"),
    SYM(EventElapsedTime, "cuEventElapsedTime"),
    SYM(GetErrorName, "cuGetErrorName"),
    SYM(GetErrorString, "cuGetErrorString"),
};

int vgc_check(const struct vgc_api *api, CUresult r, const char *what,
              struct vg_error *err)
{
    const char *name = NULL, *str = NULL;

    if (r == 0) {
        return 0;
    }
    if (api->GetErrorName) {
        api->GetErrorName(r, &name);
        api->GetErrorString(r, &str);
    }
    return vg_error_set(err, EIO, "%s: %s (%s)", what,
                        name ? name : "CUDA error", str ? str : "?");
}

static int resolve(struct vgc_api *api, struct vg_error *err)
{
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        void *fn = dlsym(api->lib, syms[i].name);

        if (!fn) {
            return vg_error_set(err, ENOSYS,
                                "the NVIDIA driver's libcuda lacks %s "
                                "(driver too old?)",
                                syms[i].name);
        }
        memcpy((char *)api + syms[i].offset, &fn, sizeof(fn));
    }
    return 0;
}

int vgc_load(struct vgc_api *api, struct vg_error *err)
{
    const char *path = getenv("VGMIG_LIBCUDA");
    int ret;

    memset(api, 0, sizeof(*api));
    if (!path || !*path) {
        path = "libcuda.so.1";
    }
    api->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!api->lib) {
        return vg_error_set(err, ENOENT,
                            "no NVIDIA driver: cannot load %s (%s)", path,
                            dlerror());
    }
    ret = resolve(api, err);
    if (ret == 0 && vgc_check(api, api->Init(0), "cuInit", err) < 0) {
        ret = -ENODEV;
        if (err) {
            err->code = ENODEV;
        }
    }
    if (ret < 0) {
        vgc_unload(api);
    }
    return ret;
}

void vgc_unload(struct vgc_api *api)
{
    if (api->lib) {
        dlclose(api->lib);
    }
    memset(api, 0, sizeof(*api));
}
