/*
 * cuda-fatbin.S -- embed the fatbin nvcc built from cuda-kernels.cu;
 * the Makefile defines VGC_FATBIN_PATH.
 */
    .section .rodata
    .balign 64
    .globl vgc_fatbin
vgc_fatbin:
    .incbin VGC_FATBIN_PATH
vgc_fatbin_end:
    .balign 8
    .globl vgc_fatbin_size
vgc_fatbin_size:
    .quad vgc_fatbin_end - vgc_fatbin
    .section .note.GNU-stack, "", @progbits
