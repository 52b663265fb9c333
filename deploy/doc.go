// Package deploy holds tokentap's deployment files (Kubernetes manifests
// under kubernetes/, with optional components and an example overlay, a
// Grafana dashboard under grafana/; README.md is their guide) and their
// tests: every object decoded with the Kubernetes API's own types, the
// kustomize renderings, the matrix Job run as local processes, and the
// dashboard's queries against a real Prometheus. It is a module of its
// own so tokentap's module does not depend on the Kubernetes libraries.
package deploy
