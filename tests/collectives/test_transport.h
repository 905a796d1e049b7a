// The transport a test target runs over, chosen in BUILD with
// copts = ["-DCHORUS_TEST_TRANSPORT=kTcp"]; the in-process transport otherwise. Internal
// linkage, so targets built both ways never disagree about it.
#ifndef CHORUS_TESTS_COLLECTIVES_TEST_TRANSPORT_H_
#define CHORUS_TESTS_COLLECTIVES_TEST_TRANSPORT_H_

#include "tests/collectives/world.h"

#ifndef CHORUS_TEST_TRANSPORT
#define CHORUS_TEST_TRANSPORT kInproc
#endif

namespace chorus::testing {

static constexpr TransportKind kTestTransport = TransportKind::CHORUS_TEST_TRANSPORT;

}  // namespace chorus::testing

#endif  // CHORUS_TESTS_COLLECTIVES_TEST_TRANSPORT_H_
