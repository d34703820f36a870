/*
 * cuda-drv.h -- the part of the CUDA driver API the CUDA backend uses,
 * loaded at run time with dlopen("libcuda.so.1").
 *
 * Nothing links against libcuda, so one vgpu-server binary runs on
 * machines without an NVIDIA driver; there vgc_load() fails with a message
 * that says so.  The types and constants below are declared here, not
 * taken from cuda.h, so this file builds without the CUDA toolkit.
 */
#ifndef VGPU_CUDA_DRV_H
#define VGPU_CUDA_DRV_H

#include <stddef.h>

#include "common/error.h"

typedef int CUresult; /* 0 is CUDA_SUCCESS */
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;

#define VGC_STREAM_NON_BLOCKING 0x1u
#define VGC_EVENT_DEFAULT       0x0u

/* The entry points, filled by vgc_load(). */
struct vgc_api {
    void *lib;
    CUresult (*Init)(unsigned flags);
    CUresult (*DriverGetVersion)(int *version);
    CUresult (*DeviceGetCount)(int *count);
    CUresult (*DeviceGet)(CUdevice *dev, int ordinal);
    CUresult (*DeviceGetName)(char *name, int len, CUdevice dev);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice dev);
    CUresult (*DevicePrimaryCtxRelease)(CUdevice dev);
    CUresult (*CtxSetCurrent)(CUcontext ctx);
    CUresult (*MemAlloc)(CUdeviceptr *p, size_t bytes);
    CUresult (*MemFree)(CUdeviceptr p);
    CUresult (*MemAllocHost)(void **p, size_t bytes);
    CUresult (*MemFreeHost)(void *p);
    CUresult (*MemHostRegister)(void *p, size_t bytes, unsigned flags);
    CUresult (*MemHostUnregister)(void *p);
    CUresult (*MemsetD32Async)(CUdeviceptr p, unsigned v, size_t n, CUstream s);
    CUresult (*MemcpyHtoDAsync)(CUdeviceptr dst, const void *src, size_t n,
                                CUstream s);
    CUresult (*MemcpyDtoHAsync)(void *dst, CUdeviceptr src, size_t n,
                                CUstream s);
    CUresult (*MemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src, size_t n,
                                CUstream s);
    CUresult (*ModuleLoadData)(CUmodule *mod, const void *image);
    CUresult (*ModuleUnload)(CUmodule mod);
    CUresult (*ModuleGetFunction)(CUfunction *fn, CUmodule mod,
                                  const char *name);
    CUresult (*LaunchKernel)(CUfunction fn, unsigned gx, unsigned gy,
                             unsigned gz, unsigned bx, unsigned by, unsigned bz,
                             unsigned shared, CUstream s, void **params,
                             void **extra);
    CUresult (*StreamCreate)(CUstream *s, unsigned flags);
    CUresult (*StreamDestroy)(CUstream s);
    CUresult (*StreamSynchronize)(CUstream s);
    CUresult (*EventCreate)(CUevent *e, unsigned flags);
    CUresult (*EventDestroy)(CUevent e);
    CUresult (*EventRecord)(CUevent e, CUstream s);
    CUresult (*EventSynchronize)(CUevent e);
    CUresult (*EventElapsedTime)(float *ms, CUevent start, CUevent end);
    CUresult (*GetErrorName)(CUresult r, const char **name);
    CUresult (*GetErrorString)(CUresult r, const char **str);
};

/*
 * dlopen libcuda.so.1 (or $VGMIG_LIBCUDA), resolve every entry point and
 * call cuInit.  -ENOENT with "no NVIDIA driver" when the library is not
 * there, -ENOSYS for a missing entry point, -ENODEV when cuInit fails.
 */
int vgc_load(struct vgc_api *api, struct vg_error *err);
/* dlclose; the API must not be used after. */
void vgc_unload(struct vgc_api *api);

/* 0 if @r is success, else -EIO with "@what: NAME (string)" in @err. */
int vgc_check(const struct vgc_api *api, CUresult r, const char *what,
              struct vg_error *err);

#endif
