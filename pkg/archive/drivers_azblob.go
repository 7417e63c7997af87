//go:build archive_azblob

package archive

import _ "gocloud.dev/blob/azureblob" // azblob://container
