/*
 * cuda-fatbin.h -- the kernels of cuda-kernels.cu as nvcc built them, a
 * fatbin embedded by cuda-fatbin.S (size 0 in a build without CUDA).
 */
#ifndef VGPU_CUDA_FATBIN_H
#define VGPU_CUDA_FATBIN_H

extern const unsigned char vgc_fatbin[];
extern const unsigned long vgc_fatbin_size;

#endif
