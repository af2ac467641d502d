#pragma once

// Pieces shared by the Linear kernels (linear.cc, linear_fma.cc, linear_bf16dot.cc); not an API.

#include <cstdint>

#include "kernels/linear.h"

// Fully unrolls a loop over a tile's outputs, rows or vectors, so that its accumulators and decoded
// weights live in registers rather than in a stack array.
#define DSV41_UNROLL _Pragma("GCC unroll 16")

namespace dsv41::linear_internal {

inline constexpr int64_t kBlock = 32;  // K block: FP8 tile width, MXFP4 block, fq8 block

// The bf16 dot kernel runs up to this many input rows on its register tiles (row groups of at
// most 4, the later groups reading the tile's weight rows again from L1); more take the buffered
// path (weights decoded once per row block into an L1 buffer), whose per-pair chains are the
// same. At 8 rows (a batched decode step's dense products) the register tiles take 0.7 (bf16) to
// 0.9 (FP8, MXFP4) of the buffered path's time; at 16 they lose on FP8.
inline constexpr int64_t kBf16DotRegisterRows = 8;
inline constexpr int64_t kRowBlock = 48;  // input rows per row block of the buffered path

// How far ahead of the block being decoded the register tiles prefetch each weight row, into L2:
// far enough that a decode GEMV keeps enough DRAM reads in flight (on Zen 4, one thread: 1 KiB
// streamed 0.32 of the measured bandwidth, 32 KiB 0.6). Addresses past the matrix are harmless.
inline constexpr int64_t kPrefetchBytes = 32768;
inline void PrefetchWeights(const void* p) { __builtin_prefetch(p, 0, 2); }

// ---- kFma (Highway, every target) -------------------------------------------------------------
// Prepared input: fp32 [rows, stride], stride = in rounded up to 32 (zero padded); for MXFP4 each
// 32-block holds its 16 even elements, then its 16 odd ones (the low and high nibbles of 16
// packed bytes).
int64_t FmaStride(const LinearWeight& w);
void FmaOutputs(const LinearWeight& w, const LinearInput& x, int64_t o_begin, int64_t o_end,
                float* y, int64_t y_stride);
// Reorders each 32-block of prepared MXFP4 rows into the kernel's positions (the even, then the
// odd elements of each group of N bytes, N the target's lanes).
void FmaReorderMxfp4(float* x, int64_t rows, int64_t stride);
// model.md §12.3 in place on `rows` rows of `stride` floats (a multiple of 32, zero padded), bit
// for bit QuantizeActivationFq8B32 + DequantizeActivationFq8B32.
void QuantizeActivations(float* x, int64_t rows, int64_t stride);

// ---- kBf16Dot (x86 AVX512-BF16) -----------------------------------------------------------------
// Prepared input: bf16 bits [rows, stride] in the kernel's element order (see linear_bf16dot.cc),
// stride = in rounded up to the format's superblock (bf16 32, FP8 64, MXFP4 128 elements).
int64_t Bf16DotStride(const LinearWeight& w);
// Converts fp32 rows holding bf16 values ([rows, src_stride], src_stride >= in, zero padded to
// Bf16DotStride) into the kernel's order: on the vector unit where the kernel runs, else (and
// for a row with a value that is not bf16) by the scalar twin.
void Bf16DotPrepare(WeightFormat format, const float* x, int64_t rows, int64_t src_stride,
                    int64_t stride, uint16_t* out);
void Bf16DotPrepareScalar(WeightFormat format, const float* x, int64_t rows, int64_t src_stride,
                          int64_t stride, uint16_t* out);
void Bf16DotOutputs(const LinearWeight& w, const LinearInput& x, int64_t o_begin, int64_t o_end,
                    float* y, int64_t y_stride, NextWeights next = {});
// The least and the greatest exponent field of the non-zero bf16 values x[0, n) (256 and 0 when
// all are zero); n a multiple of 32.
void Bf16ExponentRange(const uint16_t* x, int64_t n, int* low, int* high);
void Bf16ExponentRangeScalar(const uint16_t* x, int64_t n, int* low, int* high);
// True when this build has the kernel and the CPU has the unit, whatever the SIMD cap.
bool Bf16DotUnitPresent();
// True when, besides, no SIMD cap stops it.
bool Bf16DotSupported();

// ---- kAmxBf16 (AMX-BF16 tiles, or their scalar model) --------------------------------------
// Prepared input: the fp32 rows [rows, stride] (stride = in rounded up to 32, zero padded, fq8
// quantised when asked), then their bf16 values in tile blocks: for each group of 16 rows and
// each K tile of 32, 16 × 32 words, row k holding input row n's elements 2k, 2k + 1 at words
// 2n, 2n + 1 (rows past `rows` zero). See linear_amx.cc for the order.
int64_t AmxStride(const LinearWeight& w);
size_t AmxBlockWords(int64_t rows, int64_t stride);  // bf16 words of the blocks
void AmxPrepare(const float* x, int64_t rows, int64_t stride, uint16_t* blocks);
enum class AmxUnit {
  kBest,
  kEmulated,
  kHardware
};  // kBest: the tiles where present, else the model
void AmxOutputs(const LinearWeight& w, const LinearInput& x, int64_t o_begin, int64_t o_end,
                float* y, int64_t y_stride, AmxUnit unit = AmxUnit::kBest);
// This build has the kernel and the CPU the tiles (and the process their state).
bool AmxTilesPresent();

}  // namespace dsv41::linear_internal
