#!/bin/sh
# Regenerate the build system: needs autoconf, automake, libtool and pkg-config.
set -e
cd "$(dirname "$0")"
autoreconf -fi
