#include "tessel/core/fingerprint.h"

#include <cstdint>
#include <string>

#include "gtest/gtest.h"

namespace tessel {
namespace {

// The published FNV-1a 64 test vectors (FNV reference code, test_fnv.c).
TEST(FingerprintTest, KnownAnswers) {
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8ULL);
  EXPECT_EQ(Fnv1a64("chongo was here!\n"), 0x46810940eff5f915ULL);
  EXPECT_EQ(Fingerprint().value(), kFnv1a64OffsetBasis);
  EXPECT_EQ(kFnv1a64OffsetBasis, 0xcbf29ce484222325ULL);
  EXPECT_EQ(kFnv1a64Prime, 0x100000001b3ULL);
}

TEST(FingerprintTest, BytesInPiecesEqualsBytesAtOnce) {
  const std::string text = "foobar";
  EXPECT_EQ(Fingerprint().Bytes("foo").Bytes("bar").value(), Fnv1a64(text));
  EXPECT_EQ(Fingerprint().Bytes(text.data(), text.size()).value(), Fnv1a64(text));
  EXPECT_EQ(Fingerprint().Bytes(nullptr, 0).value(), Fnv1a64(""));
}

TEST(FingerprintTest, IntegersAreEightLittleEndianBytes) {
  const unsigned char bytes[8] = {0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01};
  EXPECT_EQ(Fingerprint().U64(0x0102030405060708ULL).value(), Fnv1a64(bytes, sizeof(bytes)));
  EXPECT_EQ(Fingerprint().Int(-1).value(), Fingerprint().U64(~uint64_t{0}).value());
  EXPECT_NE(Fingerprint().Int(1).value(), Fingerprint().Int(256).value());
}

TEST(FingerprintTest, ListsAndStringsCarryTheirLength) {
  EXPECT_EQ(Fingerprint().Ints({4, 5}).value(), Fingerprint().Int(2).Int(4).Int(5).value());
  EXPECT_NE(Fingerprint().Ints({1}).Ints({}).value(), Fingerprint().Ints({}).Ints({1}).value());
  EXPECT_EQ(Fingerprint().Str("ab").value(), Fingerprint().Int(2).Bytes("ab").value());
  EXPECT_NE(Fingerprint().Str("ab").Str("c").value(), Fingerprint().Str("a").Str("bc").value());
}

}  // namespace
}  // namespace tessel
