// The roofline's compute probes (ops/roofline.h): on every ISA the CPU
// supports each peak has a probe of that ISA's instructions, matching the
// kernels the selection actually runs (int8: the quant table's name; bf16:
// native dot products only where the linears use them), and measures a
// nonzero rate.
#include <gtest/gtest.h>

#include <string>

#include "ops/cpu/kernels.h"
#include "ops/ops.h"
#include "ops/quant.h"
#include "ops/roofline.h"
#include "ops_test_util.h"

namespace pagoda::ops::testing {
namespace {

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

class Roofline : public IsaTest {};

TEST_P(Roofline, ProbesAreTheSelectedKernelsInstructions) {
  const Isa isa = GetParam();
  const std::string fp32 = peak_probe(PeakKind::Fp32Fma, isa).name;
  const std::string bf16 = peak_probe(PeakKind::Bf16Dot, isa).name;
  const std::string int8 = peak_probe(PeakKind::Int8Dot, isa).name;
  const bool native_bf16 = cpu::active_kernels().linear_bf16_dot != nullptr;
  const std::string kernels = int8_kernel_name();
#if defined(__aarch64__)
  // f32: fmla on every variant (the scalar kernels' 4-lane vectors compile
  // to NEON, AArch64's baseline).
  EXPECT_EQ(fp32, "neon fmla");
  // bf16: bfdot exactly where the linears use it; widened to f32 elsewhere.
  EXPECT_EQ(contains(bf16, "bfdot"), native_bf16) << bf16;
  if (!native_bf16) {
    EXPECT_TRUE(contains(bf16, "widen")) << bf16;
  }
  // int8: sdot where the quant kernels use it; widening multiplies below
  // (the scalar loops vectorize to smull as well).
  if (kernels == "neon-sdot") {
    EXPECT_EQ(int8, "neon sdot");
  } else {
    EXPECT_TRUE(kernels == "neon" || kernels == "scalar") << kernels;
    EXPECT_TRUE(contains(int8, "smull")) << int8;
  }
#else
  // f32: the ISA's vector width.
  const char* width = isa == Isa::Avx512 || isa == Isa::Avx512Bf16 ? "avx512"
                      : isa == Isa::Scalar                         ? "scalar"
                                                                   : "avx2";
  EXPECT_TRUE(contains(fp32, width)) << fp32;
  // bf16: a native dot product exactly where the linears have one; the
  // widening FMA path elsewhere (scalar: plain multiply-adds).
  EXPECT_EQ(contains(bf16, "vdpbf16ps"), native_bf16) << bf16;
  if (!native_bf16 && isa != Isa::Scalar) {
    EXPECT_TRUE(contains(bf16, "widen")) << bf16;
  }
  // int8: the instruction of the quant kernels this selection runs.
  if (kernels == "avx512-vnni") {
    EXPECT_EQ(int8, "avx512 vpdpbusd");
  } else if (kernels == "avx-vnni") {
    EXPECT_EQ(int8, "avx-vnni vpdpbusd");
  } else if (kernels == "avx2") {
    EXPECT_TRUE(contains(int8, "vpmaddubsw")) << int8;
  } else {
    EXPECT_EQ(kernels, "scalar");
    EXPECT_TRUE(contains(int8, "scalar")) << int8;
  }
#endif
}

TEST_P(Roofline, EveryPeakIsMeasuredAndNonzero) {
  for (PeakKind kind : {PeakKind::Fp32Fma, PeakKind::Bf16Dot, PeakKind::Int8Dot}) {
    EXPECT_GT(run_peak_loop(kind, 1000), 0) << peak_kind_name(kind);
  }
  const ops::Roofline r = measure_roofline(1, 0.01, int64_t{4} << 20);
  EXPECT_EQ(r.isa, GetParam());
  EXPECT_GT(r.read_gb_per_s, 0);
  EXPECT_GT(r.fp32_gflops, 0);
  EXPECT_GT(r.bf16_gflops, 0);
  EXPECT_GT(r.int8_gops, 0);
  EXPECT_EQ(std::string(r.int8_probe), peak_probe(PeakKind::Int8Dot, GetParam()).name);
}

INSTANTIATE_TEST_SUITE_P(AllSupported, Roofline, ::testing::ValuesIn(supported_isas()),
                         isa_test_name);

TEST(IsaList, SupportedIsasAreTheSupportedOnesInOrder) {
  std::string names;
  int last = -1;
  for (Isa isa : supported_isas()) {
    EXPECT_TRUE(isa_supported(isa));
    names += std::string(names.empty() ? "" : ", ") + isa_name(isa);
    int index = 0;
    while (kAllIsas[index] != isa) ++index;
    EXPECT_GT(index, last);
    last = index;
  }
  EXPECT_EQ(supported_isa_names(), names);
  int count = 0;
  for (Isa isa : kAllIsas) count += isa_supported(isa) ? 1 : 0;
  EXPECT_EQ(static_cast<size_t>(count), supported_isas().size());
}

}  // namespace
}  // namespace pagoda::ops::testing
