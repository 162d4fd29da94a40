/* The CUDA dequantization of 4-bit weights (kernels_quant4.cu) against the CPU oracle (model/quant4.c): NF4 and
 * FP4, plain and double-quantized absmax, whole and ragged sizes; every bf16 output must be the CPU's fp32 value
 * rounded to bf16, bit for bit. */
#include "gpu_test_util.h"
#include "model/quant4.h"

static void check_dequantize(int64_t n, tt_quant4_type type, bool double_quant) {
    const tt_quant4_format format = {.type = type, .double_quant = double_quant};
    const tt_quant4_layout l = tt_quant4_layout_of(n, &format);
    float *values = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i += 2) {
        double pair[2];
        tt_rng_normal_pair(&gpu_test_rng, pair);
        values[i] = tt_bf16_to_f32(tt_f32_to_bf16((float)(0.02 * pair[0])));
        if (i + 1 < n) values[i + 1] = tt_bf16_to_f32(tt_f32_to_bf16((float)(0.02 * pair[1])));
    }
    for (int64_t i = 0; i < 64 && i < n; i++) values[i] = 0.0f; /* an all-zero block */
    unsigned char *quantized = malloc(l.bytes);
    tt_quant4_quantize(quantized, values, n, &format);
    float *expected = malloc(sizeof(float) * (size_t)n);
    tt_quant4_dequantize(expected, quantized, n, &format);

    void *device_quantized;
    TT_CUDA_CHECK(cudaMalloc(&device_quantized, l.bytes));
    TT_CUDA_CHECK(cudaMemcpy(device_quantized, quantized, l.bytes, cudaMemcpyHostToDevice));
    tt_bf16 *out = device_poisoned(n);
    tt_cuda_dequantize_4bit(out, device_quantized, n, &format, 0);
    TT_CUDA_CHECK(cudaDeviceSynchronize());
    tt_bf16 *bits = malloc(sizeof(tt_bf16) * (size_t)n);
    TT_CUDA_CHECK(cudaMemcpy(bits, out, sizeof(tt_bf16) * (size_t)n, cudaMemcpyDeviceToHost));
    int64_t wrong = 0, first_wrong = -1;
    for (int64_t i = 0; i < n; i++)
        if (bits[i] != tt_f32_to_bf16(expected[i]) && wrong++ == 0) first_wrong = i;
    TT_EXPECT(wrong == 0, "%s%s, %lld values: %lld differ from the CPU's (first at %lld: 0x%04x vs 0x%04x)",
              type == TT_QUANT4_NF4 ? "nf4" : "fp4", double_quant ? " double-quantized" : "", (long long)n,
              (long long)wrong, (long long)first_wrong, first_wrong >= 0 ? bits[first_wrong] : 0,
              first_wrong >= 0 ? tt_f32_to_bf16(expected[first_wrong]) : 0);
    TT_CUDA_CHECK(cudaFree(device_quantized));
    TT_CUDA_CHECK(cudaFree(out));
    free(bits);
    free(expected);
    free(quantized);
    free(values);
}

int main(void) {
    tt_rng_seed(&gpu_test_rng, 17);
    tt_cuda_quant4_set_dynamic_map(tt_quant4_dynamic_map());
    const int64_t sizes[] = {135, 64 * 300 + 8, 4096 * 1024, 1024 * 4096 + 5};
    for (int s = 0; s < 4; s++)
        for (int type = 0; type < 2; type++)
            for (int dq = 0; dq < 2; dq++) check_dequantize(sizes[s], (tt_quant4_type)type, dq);
    return tt_test_summary("gpu_quant4");
}
