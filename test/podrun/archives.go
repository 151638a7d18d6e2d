package podrun

import (
	"os"
	"path/filepath"
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
