/*
 * median.h -- the median of a set of measurements.
 */
#ifndef VG_MEDIAN_H
#define VG_MEDIAN_H

#include <stddef.h>

/* The median of the @n values at @v (sorted in place as a side effect):
 * the middle one, or the mean of the two middle ones when @n is even;
 * 0 if @n is 0. */
double vg_median(double *v, size_t n);

#endif
