#include "chorus/rendezvous/rank_env.h"

#include <stdlib.h>

#include <catch2/catch.hpp>
#include <string>

#include "chorus/core/status.h"

namespace chorus {
namespace {

// Clears every variable the reader looks at, then sets the given ones; restores nothing because
// each test case sets up what it needs.
void SetEnvironment(std::initializer_list<std::pair<const char*, const char*>> variables) {
  for (const char* name :
       {"CHORUS_RANK", "CHORUS_SIZE", "CHORUS_LOCAL_RANK", "CHORUS_LOCAL_SIZE", "RANK",
        "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
        "SLURM_LOCALID", "CHORUS_STORE"}) {
    unsetenv(name);
  }
  for (const auto& [name, value] : variables) setenv(name, value, 1);
}

bool Mentions(const absl::Status& status, const std::string& text) {
  return std::string(status.message()).find(text) != std::string::npos;
}

TEST_CASE("chorusrun's variables give the identity") {
  SetEnvironment({{"CHORUS_RANK", "2"},
                  {"CHORUS_SIZE", "4"},
                  {"CHORUS_LOCAL_RANK", "2"},
                  {"CHORUS_LOCAL_SIZE", "3"}});
  const auto identity = ReadRankIdentity();
  REQUIRE(identity.ok());
  CHECK(identity->rank == 2);
  CHECK(identity->size == 4);
  CHECK(identity->local_rank == 2);
  CHECK(identity->local_size == 3);
  CHECK(identity->source == "CHORUS_RANK/CHORUS_SIZE");
}

TEST_CASE("torchrun's variables are used when chorusrun's are absent") {
  SetEnvironment({{"RANK", "1"}, {"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "4"},
                  {"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}});
  const auto identity = ReadRankIdentity();
  REQUIRE(identity.ok());
  CHECK(identity->rank == 1);
  CHECK(identity->size == 8);
  CHECK(identity->local_rank == -1);
  CHECK(identity->local_size == 4);
  CHECK(identity->source == "RANK/WORLD_SIZE");
}

TEST_CASE("Slurm's variables are the last resort") {
  SetEnvironment({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}, {"SLURM_LOCALID", "1"}});
  const auto identity = ReadRankIdentity();
  REQUIRE(identity.ok());
  CHECK(identity->rank == 5);
  CHECK(identity->size == 6);
  CHECK(identity->local_rank == 1);
  CHECK(identity->local_size == -1);
  CHECK(identity->source == "SLURM_PROCID/SLURM_NTASKS");
}

TEST_CASE("chorusrun's variables win over an enclosing Slurm job") {
  SetEnvironment({{"CHORUS_RANK", "0"}, {"CHORUS_SIZE", "2"}, {"SLURM_PROCID", "5"},
                  {"SLURM_NTASKS", "6"}});
  const auto identity = ReadRankIdentity();
  REQUIRE(identity.ok());
  CHECK(identity->size == 2);
}

TEST_CASE("identity errors name the variables") {
  SECTION("nothing set") {
    SetEnvironment({});
    const auto identity = ReadRankIdentity();
    CHECK(GetErrorKind(identity.status()) == ErrorKind::kInvalidArgument);
    CHECK(Mentions(identity.status(), "CHORUS_RANK and CHORUS_SIZE"));
    CHECK(Mentions(identity.status(), "chorusrun"));
  }
  SECTION("half a pair; the other launcher's pair is not used instead") {
    SetEnvironment({{"CHORUS_RANK", "1"}, {"RANK", "1"}, {"WORLD_SIZE", "2"}});
    const auto identity = ReadRankIdentity();
    CHECK(GetErrorKind(identity.status()) == ErrorKind::kInvalidArgument);
    CHECK(Mentions(identity.status(), "CHORUS_SIZE is not set"));
  }
  SECTION("rank not below size") {
    SetEnvironment({{"RANK", "4"}, {"WORLD_SIZE", "4"}});
    const auto identity = ReadRankIdentity();
    CHECK(GetErrorKind(identity.status()) == ErrorKind::kInvalidArgument);
    CHECK(Mentions(identity.status(), "RANK=4 is not below WORLD_SIZE=4"));
  }
  SECTION("not a number") {
    SetEnvironment({{"CHORUS_RANK", "one"}, {"CHORUS_SIZE", "2"}});
    const auto identity = ReadRankIdentity();
    CHECK(GetErrorKind(identity.status()) == ErrorKind::kInvalidArgument);
    CHECK(Mentions(identity.status(), "CHORUS_RANK='one'"));
  }
  SECTION("size zero") {
    SetEnvironment({{"CHORUS_RANK", "0"}, {"CHORUS_SIZE", "0"}});
    CHECK(GetErrorKind(ReadRankIdentity().status()) == ErrorKind::kInvalidArgument);
  }
}

}  // namespace
}  // namespace chorus
