// DeepSeek V4 cache codecs against tools/deepseek_v4_reference.py: the
// 584-byte fp8 entry (--fp8-cache) and the MXFP4 indexer key (--indexer-cache
// fp4) give the tool's simulated values bit for bit on the edge cases of
// tests/data/v4_codecs/fixtures.txt (tools/gen_v4_codec_fixtures.py), the
// fast and scalar-twin writers give the same bytes, and the byte layouts
// (page bodies then trailers, nibble order, padded page strides) are where
// ops.h says.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "ops/reference.h"
#include "ops_test_util.h"

namespace pagoda::ops::testing {
namespace {

struct Section {
  int head_dim = 0, rope_dim = 0;
  std::vector<std::vector<float>> in, want;
};

std::vector<float> parse_hex_line(const std::string& line) {
  std::istringstream is(line);
  std::vector<float> v;
  std::string tok;
  while (is >> tok) {
    const auto bits = static_cast<uint32_t>(std::stoul(tok, nullptr, 16));
    float f;
    std::memcpy(&f, &bits, 4);
    v.push_back(f);
  }
  return v;
}

// Sections keyed "fp8 512", "fp8 64", "fp4 128".
std::map<std::string, Section> load_fixtures() {
  const std::string path = std::string(PAGODA_TEST_DATA_DIR) + "/v4_codecs/fixtures.txt";
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  std::map<std::string, Section> out;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream hs(line);
    std::string kind;
    Section s;
    int n = 0;
    hs >> kind >> s.head_dim >> s.rope_dim >> n;
    for (int i = 0; i < n; ++i) {
      std::getline(f, line);
      s.in.push_back(parse_hex_line(line));
      std::getline(f, line);
      s.want.push_back(parse_hex_line(line));
      EXPECT_EQ(s.in.back().size(), size_t(s.head_dim));
      EXPECT_EQ(s.want.back().size(), size_t(s.head_dim));
    }
    std::ostringstream key;
    key << kind << " " << s.head_dim;
    out[key.str()] = s;
  }
  return out;
}

bool same_bits(const float* a, const float* b, int n, std::string* where) {
  for (int i = 0; i < n; ++i) {
    if (std::memcmp(a + i, b + i, 4) != 0) {
      std::ostringstream os;  // (not string +: GCC 12's -Wrestrict false positive)
      os << "[" << i << "] " << a[i] << " vs " << b[i];
      *where = os.str();
      return false;
    }
  }
  return true;
}

TEST(V4Codecs, FixturesCoverEveryFormat) {
  const auto fx = load_fixtures();
  for (const char* k : {"fp8 512", "fp8 64", "fp4 128"}) {
    ASSERT_TRUE(fx.count(k)) << k;
    EXPECT_GE(fx.at(k).in.size(), 10u) << k;
  }
}

TEST(V4Codecs, Fp8EntryMatchesTheReferenceToolBitForBit) {
  for (const auto& [name, s] : load_fixtures()) {
    if (name.rfind("fp8", 0) != 0) continue;
    const int n = static_cast<int>(s.in.size());
    // 4 entries per page, padded pages; entries in shuffled slots.
    V4EntryLayout l{4, s.head_dim, s.rope_dim, DType::F8E4M3, 0};
    l.page_bytes = 4 * l.entry_bytes() + 40;
    const int pages = (n + 3) / 4 + 1;
    std::vector<int64_t> slots(n);
    std::iota(slots.begin(), slots.end(), 0);
    std::mt19937 rng(7);
    std::shuffle(slots.begin(), slots.end(), rng);
    std::vector<float> x;
    for (const auto& r : s.in) x.insert(x.end(), r.begin(), r.end());
    std::vector<uint8_t> fast(size_t(pages) * l.page_bytes, 0xAB), twin(fast);
    write_v4_entries(x.data(), slots.data(), n, l, fast.data());
    ref::write_v4_entries(x.data(), slots.data(), n, l, twin.data());
    EXPECT_EQ(0, std::memcmp(fast.data(), twin.data(), fast.size())) << name;
    for (int i = 0; i < n; ++i) {
      std::vector<float> got(s.head_dim), got_ref(s.head_dim);
      read_v4_entry(fast.data(), l, slots[i], got.data());
      ref::read_v4_entry(fast.data(), l, slots[i], got_ref.data());
      std::string where;
      EXPECT_TRUE(same_bits(got.data(), s.want[i].data(), s.head_dim, &where))
          << name << " row " << i << " " << where;
      EXPECT_TRUE(same_bits(got_ref.data(), s.want[i].data(), s.head_dim, &where))
          << name << " twin row " << i << " " << where;
    }
  }
}

TEST(V4Codecs, Fp8EntryLayoutIsBodiesThenTrailers) {
  const V4EntryLayout l{64, 512, 64, DType::F8E4M3, 37440};
  EXPECT_EQ(l.entry_bytes(), 584);
  EXPECT_EQ(l.fp8_body_bytes(), 576);
  EXPECT_EQ(l.fp8_trailer_bytes(), 8);
  // Entry 5 of page 2: body at 2 * 37440 + 5 * 576, scales after the 64 bodies.
  std::vector<uint8_t> cache(3 * 37440, 0xAB);
  std::vector<float> x(512, 0.0f);
  for (int g = 0; g < 7; ++g) x[g * 64] = 448.0f * std::ldexp(1.0f, g - 3);  // scale 2^(g-3)
  x[448] = 1.5f;                                                            // rope, bf16 0x3FC0
  const int64_t slot = 2 * 64 + 5;
  write_v4_entries(x.data(), &slot, 1, l, cache.data());
  const int64_t body = 2 * 37440 + 5 * 576, trailer = 2 * 37440 + 64 * 576 + 5 * 8;
  for (int g = 0; g < 7; ++g) {
    EXPECT_EQ(cache[body + g * 64], 0x7E) << g;          // 448 / 2^(g-3) * ... = e4m3 448
    EXPECT_EQ(cache[trailer + g], 127 + g - 3) << g;      // UE8M0 exponent byte
  }
  EXPECT_EQ(cache[trailer + 7], 0);  // the pad
  EXPECT_EQ(cache[body + 448], 0xC0);
  EXPECT_EQ(cache[body + 449], 0x3F);
  EXPECT_EQ(cache[trailer + 8], 0xAB);  // the next entry's trailer is untouched
  EXPECT_EQ(cache[body - 1], 0xAB);
}

TEST(V4Codecs, F32AndBf16EntriesRoundTripInPaddedPages) {
  std::mt19937 rng(3);
  for (DType dt : {DType::F32, DType::BF16}) {
    V4EntryLayout l{2, 64, 16, dt, 0};
    l.page_bytes = 2 * l.entry_bytes() + 64;
    const auto x = random_vec(5 * 64, rng);
    const std::vector<int64_t> slots = {3, -1, 0, 5, 2};
    std::vector<uint8_t> cache(size_t(4 * l.page_bytes), 0xAB), twin(cache);
    write_v4_entries(x.data(), slots.data(), 5, l, cache.data());
    ref::write_v4_entries(x.data(), slots.data(), 5, l, twin.data());
    EXPECT_EQ(cache, twin) << dtype_name(dt);
    for (int i = 0; i < 5; ++i) {
      if (slots[i] < 0) continue;
      std::vector<float> got(64), want(x.begin() + i * 64, x.begin() + (i + 1) * 64);
      read_v4_entry(cache.data(), l, slots[i], got.data());
      if (dt == DType::BF16) want = bf16_rounded(want);
      EXPECT_EQ(got, want) << dtype_name(dt) << " slot " << slots[i];
    }
    // The page padding and slot 1 (never written) keep their bytes.
    for (int64_t b = 2 * l.entry_bytes(); b < l.page_bytes; ++b) ASSERT_EQ(cache[b], 0xAB);
    for (int64_t b = l.entry_bytes(); b < 2 * l.entry_bytes(); ++b) ASSERT_EQ(cache[b], 0xAB);
  }
}

TEST(V4Codecs, Mxfp4KeyMatchesTheReferenceToolBitForBit) {
  const auto fixtures = load_fixtures();
  const Section& s = fixtures.at("fp4 128");
  const int n = static_cast<int>(s.in.size());
  IndexerLayout l{8, 128, DType::F4E2M1, 0};
  l.page_stride = l.page_bytes() + 24;
  EXPECT_EQ(l.page_bytes(), 8 * 68);
  std::vector<float> x;
  for (const auto& r : s.in) x.insert(x.end(), r.begin(), r.end());
  std::vector<int64_t> slots(n);
  std::iota(slots.begin(), slots.end(), 0);
  std::mt19937 rng(5);
  std::shuffle(slots.begin(), slots.end(), rng);
  const size_t bytes = size_t((n + 7) / 8) * l.page_step();
  std::vector<uint8_t> fast(bytes, 0), twin(bytes, 0);
  write_indexer_k(x.data(), slots.data(), n, l, fast.data());
  ref::write_indexer_k(x.data(), slots.data(), n, l, twin.data());
  EXPECT_EQ(fast, twin);
  for (int i = 0; i < n; ++i) {
    std::vector<float> got(128);
    for (int d = 0; d < 128; ++d) got[d] = ref::indexer_mxfp4_at(fast.data(), l, slots[i], d);
    std::string where;
    EXPECT_TRUE(same_bits(got.data(), s.want[i].data(), 128, &where)) << "row " << i << " " << where;
  }
}

TEST(V4Codecs, Mxfp4LayoutLowNibbleFirstThenScales) {
  const IndexerLayout l{4, 64, DType::F4E2M1, 0};  // 32 + 2 bytes per key
  std::vector<float> x(64, 0.0f);
  x[0] = 1.0f;   // block 0 amax 6 -> scale 1: code 2
  x[1] = -3.0f;  // code 8 | 5
  x[2] = 6.0f;   // code 7
  x[32] = 0.75f; // block 1: amax 0.75 -> scale 2^ceil(log2(0.125)) = 1/8: 6 -> code 7
  const int64_t slot = 2;
  std::vector<uint8_t> cache(size_t(l.page_bytes()), 0);
  write_indexer_k(x.data(), &slot, 1, l, cache.data());
  EXPECT_EQ(cache[2 * 32 + 0], 0xD2);
  EXPECT_EQ(cache[2 * 32 + 1], 0x07);
  EXPECT_EQ(cache[2 * 32 + 16], 0x07);
  EXPECT_EQ(cache[4 * 32 + 2 * 2 + 0], 127);
  EXPECT_EQ(cache[4 * 32 + 2 * 2 + 1], 127 - 3);
}

}  // namespace
}  // namespace pagoda::ops::testing
