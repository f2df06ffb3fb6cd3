import sys

from silica.resident.daemon import main

sys.exit(main())
