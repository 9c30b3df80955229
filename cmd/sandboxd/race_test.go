//go:build race

package main

// raceEnabled: the tests run with -race, so the agent binary they start is
// built with it too and a data race in the agent fails the test.
const raceEnabled = true
