// Package deploy holds tokentap's deployment files (Kubernetes manifests
// under kubernetes/, a Grafana dashboard under grafana/) and the test that
// decodes them with the Kubernetes API's own types. It is a module of its
// own so tokentap's module does not depend on the Kubernetes libraries.
package deploy
