// ISA selection: detection, defaults, forcing, and rejecting what the CPU
// lacks.
#include <gtest/gtest.h>

#include <cstdio>
#include <iterator>
#include <set>
#include <string>

#if defined(__x86_64__)
#include <cpuid.h>
#elif defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include "core/error.h"
#include "ops/ops.h"

namespace pagoda::ops {
namespace {

// Every variant of both architectures (ops::kAllIsas holds only this
// build's): the other architecture's must be refused, not selected.
constexpr Isa kEveryIsa[] = {Isa::Scalar,     Isa::Avx2, Isa::Avx2Vnni, Isa::Avx512,
                             Isa::Avx512Bf16, Isa::Neon, Isa::NeonDot,  Isa::NeonBf16};

TEST(Dispatch, DefaultIsBestSupported) {
  EXPECT_TRUE(isa_supported(Isa::Scalar));
  EXPECT_TRUE(isa_supported(best_isa()));
  EXPECT_EQ(current_isa(), best_isa());
  // best_isa is the widest supported one.
  if (isa_supported(Isa::Avx512Bf16)) {
    EXPECT_EQ(best_isa(), Isa::Avx512Bf16);
  } else if (isa_supported(Isa::Avx512)) {
    EXPECT_EQ(best_isa(), Isa::Avx512);
  } else if (isa_supported(Isa::Avx2Vnni)) {
    EXPECT_EQ(best_isa(), Isa::Avx2Vnni);
  } else if (isa_supported(Isa::Avx2)) {
    EXPECT_EQ(best_isa(), Isa::Avx2);
  } else if (isa_supported(Isa::NeonBf16)) {
    EXPECT_EQ(best_isa(), Isa::NeonBf16);
  } else if (isa_supported(Isa::NeonDot)) {
    EXPECT_EQ(best_isa(), Isa::NeonDot);
  } else if (isa_supported(Isa::Neon)) {
    EXPECT_EQ(best_isa(), Isa::Neon);
  }
}

#if defined(__x86_64__)
TEST(Dispatch, AvxImpliesItsPrerequisites) {
  if (isa_supported(Isa::Avx512Bf16)) {
    EXPECT_TRUE(isa_supported(Isa::Avx512));
  }
  EXPECT_EQ(isa_supported(Isa::Avx512Bf16),
            isa_supported(Isa::Avx512) && __builtin_cpu_supports("avx512bf16") != 0);
  if (isa_supported(Isa::Avx512)) {
    EXPECT_TRUE(isa_supported(Isa::Avx2));
  }
  // Avx2Vnni: Avx2 plus AVX-VNNI (CPUID leaf 7 subleaf 1, EAX bit 4).
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool avx_vnni = __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & 16u) != 0;
  EXPECT_EQ(isa_supported(Isa::Avx2Vnni), isa_supported(Isa::Avx2) && avx_vnni);
  EXPECT_EQ(isa_supported(Isa::Avx2),
            __builtin_cpu_supports("avx2") != 0 && __builtin_cpu_supports("fma") != 0);
  for (Isa isa : {Isa::Neon, Isa::NeonDot, Isa::NeonBf16}) EXPECT_FALSE(isa_supported(isa));
}
#endif

#if defined(__aarch64__)
// The levels follow the kernel's hwcaps (qemu-user reports its -cpu model's:
// scripts/test-aarch64.sh runs the tests on a model with and one without
// the extensions).
TEST(Dispatch, NeonLevelsFollowHwcaps) {
  const unsigned long hwcap = getauxval(AT_HWCAP), hwcap2 = getauxval(AT_HWCAP2);
  EXPECT_TRUE(isa_supported(Isa::Neon));  // every AArch64 CPU
  EXPECT_EQ(isa_supported(Isa::NeonDot), (hwcap & HWCAP_ASIMDDP) != 0);
  EXPECT_EQ(isa_supported(Isa::NeonBf16),
            (hwcap & HWCAP_ASIMDDP) != 0 && (hwcap2 & HWCAP2_BF16) != 0);
  for (Isa isa : {Isa::Avx2, Isa::Avx2Vnni, Isa::Avx512, Isa::Avx512Bf16}) {
    EXPECT_FALSE(isa_supported(isa)) << isa_name(isa);
  }
  // What the CPU model has, in the log of the run.
  std::printf("hwcaps: asimddp %d bf16 %d; best isa %s\n", (hwcap & HWCAP_ASIMDDP) != 0,
              (hwcap2 & HWCAP2_BF16) != 0, isa_name(best_isa()));
}
#endif

TEST(Dispatch, SetIsaSelectsOrRejects) {
  for (Isa isa : kEveryIsa) {
    if (isa_supported(isa)) {
      set_isa(isa);
      EXPECT_EQ(current_isa(), isa);
    } else {
      const Isa before = current_isa();
      EXPECT_THROW(set_isa(isa), InputError) << isa_name(isa);
      try {
        set_isa(isa);
      } catch (const InputError& e) {  // the message names what the CPU has
        EXPECT_NE(std::string(e.what()).find(supported_isa_names()), std::string::npos);
      }
      EXPECT_EQ(current_isa(), before);
    }
  }
  set_isa(best_isa());
}

TEST(Dispatch, NamesAreDistinct) {
  std::set<std::string> names;
  for (Isa isa : kEveryIsa) names.insert(isa_name(isa));
  EXPECT_EQ(names.size(), std::size(kEveryIsa));
  EXPECT_EQ(std::string(isa_name(Isa::Scalar)), "scalar");
}

}  // namespace
}  // namespace pagoda::ops
