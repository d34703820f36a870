/*
 * cuda-fatbin-none.c -- no kernels: this build was configured without
 * CUDA (configure --with-cuda=no, or no nvcc found).  The CUDA backend
 * then refuses to start and says so.
 */
#include "cuda-fatbin.h"

const unsigned char vgc_fatbin[1];
const unsigned long vgc_fatbin_size = 0;
