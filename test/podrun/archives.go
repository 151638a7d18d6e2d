package podrun

import (
	"os"
	"path/filepath"
	"testing"
)

// ImageArchives are the image archives `make image` writes under the repository root, by image name (Runtime.Images).
func ImageArchives(root string) map[string]string {
	return map[string]string{
		"ovn-egressip:latest":      filepath.Join(root, "_output", "images", "ovn-egressip.tar"),
		"ovn-egressip-node:latest": filepath.Join(root, "_output", "images", "ovn-egressip-node.tar"),
	}
}

// MissingArchive is an archive of images that is not there ("" when every one is).
func MissingArchive(images map[string]string) string {
	for _, a := range images {
		if _, err := os.Stat(a); err != nil {
			return a
		}
	}
	return ""
}

// Dist is what a checkout gives to run ovnkube from its images: the archives and the ociimage helper `make image`
// writes, and the manifests of dist/manifests.
type Dist struct {
	Images    map[string]string // ImageArchives
	OCIImage  string            // _output/bin/ociimage (Runtime.OCIImage)
	Manifests *Manifests
}

// NeedDist reads the checkout at root for a test: when an image archive is missing it calls missing with its path
// (which skips or fails the test); when dist/manifests does not load it fails the test.
func NeedDist(t testing.TB, root string, missing func(archive string)) Dist {
	t.Helper()
	images := ImageArchives(root)
	if a := MissingArchive(images); a != "" {
		missing(a)
	}
	m, err := LoadManifests(filepath.Join(root, "dist", "manifests"))
	if err != nil {
		t.Fatal(err)
	}
	return Dist{Images: images, OCIImage: filepath.Join(root, "_output", "bin", "ociimage"), Manifests: m}
}
