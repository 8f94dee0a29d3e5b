// Package config is a node's configuration: every field documented, the
// defaults in one place (Default), and the checks of the fields against
// each other (Config.Validate). The planes' own Configs are derived from
// it where node wires them.
//
// config imports the packages whose types and limits its fields name; it
// must not import node or any plane.
package config
