#!/usr/bin/env bash
# stub of OpenSage's script, for the loader tests
echo "fuzzing $1 for $2 s"
