// Inclusive cumulative sum along the last dim of a row-major [n_rows, n_cols] float tensor.
//
// One thread block per row; the row is walked in tiles of blockDim.x elements. Within a tile each
// warp scans its 32 values with shuffles, warp totals are scanned through shared memory, and the
// running total of earlier tiles (`carry`) is added. Sums are kept in double, as PyTorch's CPU
// cumsum accumulates: a float scan over thousands of elements drifts where partial sums cancel.
//
// Launch: cumsum_rows<<<n_rows, 256>>>(x, y, n_rows, n_cols);  (blockDim.x a multiple of 32, <= 1024)

#include <cuda_runtime.h>

__device__ __forceinline__ double warp_inclusive_scan(double v) {
    const unsigned lane = threadIdx.x & 31u;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
        double up = __shfl_up_sync(0xffffffffu, v, offset);
        if (lane >= offset) v += up;
    }
    return v;
}

extern "C" __global__ void cumsum_rows(const float* __restrict__ x, float* __restrict__ y,
                                       int n_rows, int n_cols) {
    __shared__ double warp_totals[32];
    const int row = blockIdx.x;
    if (row >= n_rows) return;
    const float* xr = x + (long long)row * n_cols;
    float* yr = y + (long long)row * n_cols;
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const unsigned n_warps = blockDim.x >> 5;
    double carry = 0.0;
    for (int start = 0; start < n_cols; start += blockDim.x) {
        const int col = start + threadIdx.x;
        double v = col < n_cols ? (double)xr[col] : 0.0;
        v = warp_inclusive_scan(v);
        if (lane == 31) warp_totals[warp] = v;
        __syncthreads();
        if (warp == 0) {
            double t = lane < n_warps ? warp_totals[lane] : 0.0;
            t = warp_inclusive_scan(t);
            if (lane < n_warps) warp_totals[lane] = t;
        }
        __syncthreads();
        if (warp > 0) v += warp_totals[warp - 1];
        if (col < n_cols) yr[col] = (float)(carry + v);
        carry += warp_totals[n_warps - 1];
        __syncthreads();  // warp_totals is rewritten by the next tile
    }
}
