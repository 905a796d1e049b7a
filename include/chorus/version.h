/* The version of the Chorus headers a program is compiled against. C and C++.
 *
 * The major version is the ABI: libchorus.so.<major> keeps every C function and struct layout
 * of chorus_c.h for all minor and patch versions of that major (see docs/building.md, "ABI
 * policy"). chorus_version() (chorus_c.h) returns the version of the library actually loaded,
 * encoded as CHORUS_VERSION_CODE is. */
#ifndef CHORUS_VERSION_H_
#define CHORUS_VERSION_H_

#define CHORUS_VERSION_MAJOR 0
#define CHORUS_VERSION_MINOR 1
#define CHORUS_VERSION_PATCH 0
#define CHORUS_VERSION_STRING "0.1.0"

/* major * 10000 + minor * 100 + patch, so versions compare as integers. */
#define CHORUS_VERSION_CODE \
  (CHORUS_VERSION_MAJOR * 10000 + CHORUS_VERSION_MINOR * 100 + CHORUS_VERSION_PATCH)

#endif /* CHORUS_VERSION_H_ */
